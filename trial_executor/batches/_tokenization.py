"""Tokenize once: token ids cached on disk, shared by later trials and other workers.

Within a worker process the tokenized splits are kept in memory too (the last few datasets),
so a later trial on the same data, tokenizer and length reuses them without reading the disk.

The cache key is a hash of the tokenizer (its full serialised definition), ``max_length`` and
the texts themselves, so a changed tokenizer, length or dataset can never hit a stale entry.
Entries are written to a temporary file and renamed into place, so concurrent writers on one
machine never expose a partial file, and the last identical copy simply wins.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
import time
import weakref
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trial_executor._caches import BoundedCache
from trial_executor.batches._batching import TokenizedSplit
from trial_executor.data import TextClassificationData

if TYPE_CHECKING:  # annotations only: a process that never tokenizes never imports transformers here
    from transformers import PreTrainedTokenizerBase

# Tokenizers are cached per process (one object serves many trials): hash each once. Not a
# BoundedCache: a fingerprint belongs to one live tokenizer object (keyed by identity), and goes
# with it; the dictionary holds nothing alive, needs no bound, and nothing in it can go stale.
_fingerprints: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, str] = weakref.WeakKeyDictionary()
# Tokenized data by (data, tokenizer, length settings); a worker's study uses one or two datasets.
IN_MEMORY_KEPT = 2
_IN_MEMORY: BoundedCache[tuple[object, ...], TokenizedData] = BoundedCache("batches.tokenized_data", size=IN_MEMORY_KEPT)


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash that changes whenever the tokenizer would produce different ids."""
    if tokenizer in _fingerprints:
        return _fingerprints[tokenizer]
    _fingerprints[tokenizer] = fingerprint = _fingerprint(tokenizer)
    return fingerprint


def _fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        # Encoding calls set these per call (max_length is part of the cache key anyway).
        spec.pop("truncation", None)
        spec.pop("padding", None)
        definition = json.dumps(spec, sort_keys=True)
    else:
        definition = json.dumps(tokenizer.get_vocab(), sort_keys=True)
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    digest.update(definition.encode())
    digest.update(json.dumps(tokenizer.all_special_tokens).encode())
    return digest.hexdigest()


def _cache_key(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], pairs: Sequence[str] | None, max_length: int, types: bool
) -> str:
    digest = hashlib.sha256(tokenizer_fingerprint(tokenizer).encode())
    digest.update(f"max_length={max_length};pairs={pairs is not None};types={types};rows={len(texts)}".encode())
    # Each text prefixed by its length in bytes: a text may hold any character, NUL included, so no
    # separator alone tells ["a\0b", "c"] from ["a", "b\0c"] (they shared one entry, the second study
    # trained on the first's token ids).
    for text in [*texts, *(pairs or ())]:
        encoded = text.encode()
        digest.update(f"{len(encoded)}:".encode())
        digest.update(encoded)
    return digest.hexdigest()[:32]


def _encode(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], pairs: Sequence[str] | None, max_length: int, types: bool
) -> tuple[list[list[int]], list[list[int]] | None]:
    """Token ids, and with ``types`` (pairs only) token types: 0 for the first text, 1 for the second."""
    if pairs is None:
        return tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"], None
    encoded = tokenizer(list(texts), list(pairs), truncation=True, max_length=max_length, return_token_type_ids=types)
    return encoded["input_ids"], encoded["token_type_ids"] if types else None


def _unflatten(flat: list[int], offsets: np.ndarray) -> list[list[int]]:
    return [flat[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def _load(path: Path, types: bool) -> tuple[list[list[int]], list[list[int]] | None] | None:
    try:
        with np.load(path) as stored:
            ids, offsets = stored["ids"], stored["offsets"]
            token_types = stored["types"] if types else None
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None  # missing or damaged: tokenize again and overwrite
    return _unflatten(ids.tolist(), offsets), None if token_types is None else _unflatten(token_types.tolist(), offsets)


def _store(path: Path, input_ids: list[list[int]], token_types: list[list[int]] | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    offsets = np.zeros(len(input_ids) + 1, dtype=np.int64)
    np.cumsum([len(row) for row in input_ids], out=offsets[1:])
    ids = np.fromiter((t for row in input_ids for t in row), dtype=np.int32, count=int(offsets[-1]))
    arrays = {"ids": ids, "offsets": offsets}
    if token_types is not None:
        arrays["types"] = np.fromiter((t for row in token_types for t in row), dtype=np.int8, count=int(offsets[-1]))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def tokenize(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    labels: Sequence[int] | Sequence[float] | Sequence[list[float]],
    max_length: int,
    *,
    pairs: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    token_types: bool = False,
) -> tuple[TokenizedSplit, bool]:
    """Token ids for ``texts`` (and ``pairs``), from the disk cache when present.

    With ``pairs`` and ``token_types`` (a model that embeds token types), the split carries
    token type ids too. Returns the split and whether it came from the cache.
    ``cache_dir=None`` disables caching.
    """
    types = token_types and pairs is not None
    if cache_dir is None:
        input_ids, type_ids = _encode(tokenizer, texts, pairs, max_length, types)
        return TokenizedSplit(input_ids, list(labels), type_ids), False
    path = Path(cache_dir) / f"{_cache_key(tokenizer, texts, pairs, max_length, types)}.npz"
    cached = _load(path, types)
    if cached is not None and len(cached[0]) == len(texts):
        return TokenizedSplit(cached[0], list(labels), cached[1]), True
    input_ids, type_ids = _encode(tokenizer, texts, pairs, max_length, types)
    _store(path, input_ids, type_ids)
    return TokenizedSplit(input_ids, list(labels), type_ids), False


def auto_max_length(lengths: Sequence[int], percentile: float, cap: int, multiple: int = 8) -> int:
    """The smallest multiple of ``multiple`` covering ``percentile`` % of ``lengths``, at most ``cap``.

    ``lengths`` are token counts (special tokens included) measured without a tighter cut.
    """
    if not lengths:
        return min(cap, multiple)
    ordered = sorted(lengths)
    # The smallest length L with at least percentile % of the rows at or below L.
    index = max(0, math.ceil(len(ordered) * percentile / 100) - 1)
    chosen = max(multiple, math.ceil(ordered[index] / multiple) * multiple)
    return min(chosen, cap)


@dataclass(frozen=True)
class TokenizedData:
    """Both splits tokenized at ``max_length`` (the resolved one when the config said ``auto``)."""

    train: TokenizedSplit
    valid: TokenizedSplit
    cache_hit: bool
    max_length: int
    truncated_fraction: float  # share of training rows longer than max_length (cut)
    seconds: float


def tokenize_data(
    tokenizer: PreTrainedTokenizerBase, data: TextClassificationData, max_length: int | str, *,
    percentile: float, max_positions: int, cache_dir: str | Path | None, token_types: bool = False,
) -> TokenizedData:
    """Tokenize train and validation texts; ``max_length="auto"`` first measures the training lengths.

    ``auto`` tokenizes the training texts at ``max_positions`` (the model's limit), picks the
    length with :func:`auto_max_length`, then tokenizes both splits at that length, so each
    cache entry is keyed by the length it was cut at (pairs truncate as the tokenizer does).
    An earlier trial's result in this process is reused as it is (a cache hit, nothing read).
    """
    tick = time.perf_counter()
    # The disk cache is part of the key: a run given another cache_dir still fills (and reports on) its own.
    cache = None if cache_dir is None else str(cache_dir)
    key = (data.fingerprint, tokenizer_fingerprint(tokenizer), max_length, percentile, max_positions, token_types, cache)
    kept = _IN_MEMORY.get(key)
    if kept is not None:
        return dataclasses.replace(kept, cache_hit=True, seconds=time.perf_counter() - tick)
    return _IN_MEMORY.put(key, _tokenize_data(tokenizer, data, max_length, percentile, max_positions, cache_dir, token_types, tick))


def _tokenize_data(
    tokenizer: PreTrainedTokenizerBase, data: TextClassificationData, max_length: int | str, percentile: float,
    max_positions: int, cache_dir: str | Path | None, token_types: bool, tick: float,
) -> TokenizedData:
    hits = []
    if max_length == "auto":
        full, hit = tokenize(
            tokenizer, data.train_texts, data.train_labels, max_positions, pairs=data.train_pairs, cache_dir=cache_dir,
            token_types=token_types,
        )
        hits.append(hit)
        lengths = [len(row) for row in full.input_ids]
        length = auto_max_length(lengths, percentile, max_positions)
    else:
        length, lengths = int(max_length), None
    train, hit = tokenize(tokenizer, data.train_texts, data.train_labels, length, pairs=data.train_pairs, cache_dir=cache_dir, token_types=token_types)
    hits.append(hit)
    valid, hit = tokenize(tokenizer, data.valid_texts, data.valid_labels, length, pairs=data.valid_pairs, cache_dir=cache_dir, token_types=token_types)
    hits.append(hit)
    # A fixed max_length: rows cut come out exactly max_length long (an upper bound: an uncut row may too).
    truncated = sum(len(row) >= length for row in train.input_ids) if lengths is None else sum(n > length for n in lengths)
    return TokenizedData(
        train, valid, all(hits), length, truncated / max(1, len(train)), time.perf_counter() - tick
    )
