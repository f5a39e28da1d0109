"""Storage URLs made safe to print, log and store: every password in them masked.

A password sits in the userinfo (``postgresql://user:pw@host/db``) or, as libpq also takes it, in
the query (``postgresql://host/db?user=u&password=pw``, ``sslpassword=``).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# ``?password=...`` / ``&sslpassword=...``: the value runs to the next parameter or fragment.
_QUERY_SECRET = re.compile(r"([?&](?:ssl)?password=)([^&#]*)", re.IGNORECASE)


def _masked_query(url: str) -> str:
    return _QUERY_SECRET.sub(lambda match: match.group(1) + ("***" if match.group(2) else ""), url)


def split_credentials(url: str) -> tuple[str, str, str | None, str] | None:
    """``(scheme, user, password as typed, rest)`` of ``scheme://user:password@rest``; ``None`` without credentials.

    Taken from the raw text, not from a URL parser: a password with a raw ``@``, ``/`` or
    ``?`` must be masked whole however a parser would split it, so the userinfo runs up to
    the *last* ``@`` (of the URL with its query passwords masked: they may hold one too).
    """
    scheme, separator, rest = _masked_query(url).partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not separator or not at:
        return None
    user, colon, password = userinfo.partition(":")
    return scheme, user, (password if colon else None), host


def mask_url(url: str) -> str:
    """``url`` with its passwords replaced by ``***``, safe to print and log, however malformed ``url`` is."""
    parts = split_credentials(url)  # its rest has the query passwords masked already
    if parts is None or not parts[2]:
        return _masked_query(url)
    scheme, user, _, host = parts
    return f"{scheme}://{user}:***@{host}"


def _standing_alone(secret: str) -> re.Pattern[str]:
    """``secret`` where it is not part of a longer word: a password ``p`` is not masked out of "supported"."""
    before = r"(?<!\w)" if re.match(r"\w", secret) else ""
    after = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
    return re.compile(before + re.escape(secret) + after)


def mask_secrets(text: str, url: str) -> str:
    """``text`` with the passwords of ``url`` (and the raw URL) masked wherever they stand alone, as typed or decoded."""
    text = text.replace(url, mask_url(url))
    parts = split_credentials(url)
    secrets = [parts[2]] if parts and parts[2] else []
    secrets += [value for _, value in _QUERY_SECRET.findall(url) if value]
    for secret in secrets:
        for form in sorted({secret, unquote(secret)}, key=len, reverse=True):
            text = _standing_alone(form).sub("***", text)
    return text
