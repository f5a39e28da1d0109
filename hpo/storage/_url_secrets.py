"""Storage URLs made safe to print, log and store: every password in them masked.

A password sits in the userinfo (``postgresql://user:pw@host/db``) or, as libpq also takes it, in
the query (``postgresql://host/db?user=u&password=pw``, ``sslpassword=``).
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# A query parameter: the value runs to the next parameter (SQLAlchemy reads a "#" as part of it, not as a fragment).
_QUERY_PARAMETER = re.compile(r"([?&][^=&]*=)([^&]*)")


def _is_secret(key: str) -> bool:
    """``?password=`` and ``&sslpassword=`` in any case, and percent-encoded as SQLAlchemy decodes them (``pass%77ord``)."""
    return unquote(key[1:-1]).lower() in ("password", "sslpassword")


def _query_secrets(url: str) -> list[str]:
    return [match.group(2) for match in _QUERY_PARAMETER.finditer(url) if _is_secret(match.group(1)) and match.group(2)]


def _masked_query(url: str) -> str:
    def masked(match: re.Match[str]) -> str:
        return match.group(1) + ("***" if match.group(2) else "") if _is_secret(match.group(1)) else match.group(0)

    return _QUERY_PARAMETER.sub(masked, url)


def _malformed_split(url: str) -> tuple[str, str] | None:
    """``(userinfo, rest)`` of a URL without ``://`` (``postgresql:/u:pw@host``), split at its last ``@`` (query passwords
    masked); ``None`` for a URL with ``://`` (:func:`split_credentials`) or without ``@``. The userinfo is never printed."""
    masked = _masked_query(url)
    userinfo, at, rest = masked.rpartition("@")
    return (userinfo, rest) if at and "://" not in masked else None


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
    if parts is None and (malformed := _malformed_split(url)) is not None:
        return "***@" + malformed[1]
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
    if (malformed := _malformed_split(url)) is not None and (guess := malformed[0].rpartition(":")[2]):
        secrets.append(guess)  # what follows the last ":", as a password would
    secrets += _query_secrets(url)
    for secret in secrets:
        for form in sorted({secret, unquote(secret)}, key=len, reverse=True):
            text = _standing_alone(form).sub("***", text)
    return text


def mask_urls_in(text: str) -> str:
    """``text`` (a command line's words, as an error quotes them) with the password of every URL-like word masked:
    ``--st=postgresql://u:pw@host/db`` and a stray ``u:pw@host`` as :func:`mask_url` masks them."""
    return re.sub(r"\S+", lambda word: mask_url(word.group()) if "@" in word.group() or "=" in word.group() else word.group(), text)
