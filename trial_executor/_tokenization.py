"""Tokenize once: token ids cached on disk, shared by later trials and other workers.

The cache key is a hash of the tokenizer (its full serialised definition), ``max_length`` and
the texts themselves, so a changed tokenizer, length or dataset can never hit a stale entry.
Entries are written to a temporary file and renamed into place, so concurrent writers on one
machine never expose a partial file, and the last identical copy simply wins.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerBase

from trial_executor._batching import TokenizedSplit


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash that changes whenever the tokenizer would produce different ids."""
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


def _cache_key(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], pairs: Sequence[str] | None, max_length: int) -> str:
    digest = hashlib.sha256(tokenizer_fingerprint(tokenizer).encode())
    digest.update(f"max_length={max_length};pairs={pairs is not None}".encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    for pair in pairs or ():
        digest.update(pair.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def _encode(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], pairs: Sequence[str] | None, max_length: int) -> list[list[int]]:
    if pairs is None:
        return tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
    return tokenizer(list(texts), list(pairs), truncation=True, max_length=max_length)["input_ids"]


def _load(path: Path) -> list[list[int]] | None:
    try:
        with np.load(path) as stored:
            ids, offsets = stored["ids"], stored["offsets"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None  # missing or damaged: tokenize again and overwrite
    flat = ids.tolist()
    return [flat[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def _store(path: Path, input_ids: list[list[int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    offsets = np.zeros(len(input_ids) + 1, dtype=np.int64)
    np.cumsum([len(row) for row in input_ids], out=offsets[1:])
    ids = np.fromiter((t for row in input_ids for t in row), dtype=np.int32, count=int(offsets[-1]))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, ids=ids, offsets=offsets)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def tokenize(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    labels: Sequence[int],
    max_length: int,
    *,
    pairs: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
) -> tuple[TokenizedSplit, bool]:
    """Token ids for ``texts`` (and ``pairs``), from the disk cache when present.

    Returns the split and whether it came from the cache. ``cache_dir=None`` disables caching.
    """
    if cache_dir is None:
        return TokenizedSplit(_encode(tokenizer, texts, pairs, max_length), list(labels)), False
    path = Path(cache_dir) / f"{_cache_key(tokenizer, texts, pairs, max_length)}.npz"
    cached = _load(path)
    if cached is not None and len(cached) == len(texts):
        return TokenizedSplit(cached, list(labels)), True
    input_ids = _encode(tokenizer, texts, pairs, max_length)
    _store(path, input_ids)
    return TokenizedSplit(input_ids, list(labels)), False
