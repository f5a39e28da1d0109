"""Error messages stay one readable line: every list in one is cut to a few items and "and N more"."""

from __future__ import annotations

from collections.abc import Iterable

MAX_ITEMS = 10
MAX_ITEM_CHARS = 80


def _cut(text: str) -> str:
    return text if len(text) <= MAX_ITEM_CHARS else f"{text[:MAX_ITEM_CHARS - 3]}..."


def bounded_list(items: Iterable[object], limit: int = MAX_ITEMS, *, empty: str = "none") -> str:
    """``items`` (as ``str``) joined as ``a, b, c and 7 more``: at most ``limit`` shown, each at most 80 characters.

    A data file with 2,000 classes or a storage with 500 studies would otherwise print a
    message of thousands of characters; ``empty`` when there are none.
    """
    shown: list[str] = []
    total = 0
    for item in items:
        total += 1
        if total <= limit:
            shown.append(_cut(str(item)))
    if not shown:
        return empty
    more = total - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")
