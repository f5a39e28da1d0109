"""The process's caches: each a :class:`BoundedCache`, and :func:`clear_caches` to empty them all.

A worker process keeps what its trials read or built (trained tokenizers, tokenized data,
pretrained models, collated batches, what a model directory's config says) so that its later
trials reuse it. Each cache keeps at most ``size`` entries and drops the least recently used
first, so a worker's memory does not grow with the number of datasets or models a study tries.

Every cache is registered by name when it is made. :func:`clear_caches` empties them all: the
test suite calls it before each test, so no test depends on what an earlier one left; a caller
whose next trial must start from nothing kept (measuring a first trial's cost, or handing the
memory back between studies) calls it between trials. Trials of one study need not: every key
holds what makes an entry stale (the data's fingerprint, the model directory's signature).

Torch-free: part of the executor's contract, importable by every layer.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# The live caches by name. Weak: a cache made for a while (a test's own) leaves with its owner.
_REGISTRY: weakref.WeakValueDictionary[str, BoundedCache[Any, Any]] = weakref.WeakValueDictionary()


class BoundedCache(Generic[K, V]):
    """At most ``size`` values by key, the least recently used dropped first; registered as ``name``.

    ``get`` and ``get_or_make`` make the entry the most recently used; ``in`` does not.
    """

    def __init__(self, name: str, size: int) -> None:
        if size < 1:
            raise ValueError(f"cache {name!r} needs a size of at least 1, got {size}")
        if name in _REGISTRY:
            raise ValueError(f"a cache named {name!r} exists already; give each cache its own name")
        self.name = name
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        _REGISTRY[name] = self

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        """The keys, least recently used first."""
        return iter(list(self._entries))

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value kept for ``key``, now the most recently used; ``default`` when there is none."""
        if key not in self._entries:
            return default
        self._entries.move_to_end(key)
        return self._entries[key]

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` for ``key`` (replacing any), dropping the least recently used beyond ``size``; returns ``value``."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for ``key`` (``None`` included), else ``make()``'s, kept; an exception keeps nothing."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        return self.put(key, make())

    def pop(self, key: K) -> V | None:
        """Drop ``key``'s value and return it (``None`` when there is none)."""
        return self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()


def clear_caches() -> None:
    """Empty every process cache: the next trial reads and builds everything again.

    Call it between trials only when the next one must not reuse anything (see the module
    docstring); the test suite calls it before each test.
    """
    for cache in list(_REGISTRY.values()):
        cache.clear()


def cache_names() -> list[str]:
    """The names of the caches alive in this process, sorted."""
    return sorted(_REGISTRY)
