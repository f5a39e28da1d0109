"""What a local model directory holds, as hashes of the files ``from_pretrained`` reads.

A study that began on one set of weights must not go on with another saved under the same
name: its trials would no longer be comparable, and nothing in the name would say so. The
caller stores :func:`model_files` when the study begins and compares it when the study resumes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from trial_executor._caches import BoundedCache
from trial_executor.model._source import _TOKENIZER_FILES, ALIASES, PRESETS, directory_signature

# Besides the weights (whole, sharded, indexed): the config and every tokenizer file transformers may read.
_READ_FILES = frozenset({"config.json", "special_tokens_map.json", "added_tokens.json", "merges.txt", *_TOKENIZER_FILES})
_WEIGHT_PREFIXES = ("model", "pytorch_model")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".index.json")
_HASH_CHARS = 16  # 64 bits of SHA-256: a file that changed, not an adversary
_CHUNK = 1 << 20

# Hashing reads every byte of the weights (about 0.1 s for MiniLM's 87 MiB): once per process and directory version.
_DIGESTS: BoundedCache[tuple[str, tuple[tuple[str, int, int], ...]], dict[str, str]] = BoundedCache("model_file_digests", 8)


def _read_by_from_pretrained(name: str) -> bool:
    return name in _READ_FILES or (name.startswith(_WEIGHT_PREFIXES) and name.endswith(_WEIGHT_SUFFIXES))


def _digest(file: Path) -> str:
    sha = hashlib.sha256()
    with file.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()[:_HASH_CHARS]


def model_files(name: str) -> dict[str, str]:
    """``{file name: hash}`` of what ``from_pretrained`` reads from the local directory ``name`` (an alias's too);
    ``{}`` for a preset (built from a config, nothing read) or a hub id, and for a name that is no directory."""
    if name in PRESETS:
        return {}
    path = Path(ALIASES[name]() if name in ALIASES else name)
    if not path.is_dir():
        return {}
    signature = directory_signature(str(path))
    return _DIGESTS.get_or_make(
        (str(path.resolve()), signature),
        lambda: {file: _digest(path / file) for file, _, _ in signature if _read_by_from_pretrained(file)},
    )
