"""Models and tokenizers: tiny random-init presets, or any ``from_pretrained`` source.

Presets build their model with ``from_config`` and a WordPiece tokenizer trained on the
trial's own training texts with the ``tokenizers`` library, so demos and tests need no
network. Anything else is a hub id or a local directory loaded with ``from_pretrained``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    DistilBertConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)


class ModelNotFoundError(ValueError):
    """A model name is neither a preset, a local directory, nor a loadable hub id."""


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

_tokenizer_cache: dict[str, PreTrainedTokenizerFast] = {}


def train_wordpiece_tokenizer(texts: Sequence[str], vocab_size: int = 2000) -> PreTrainedTokenizerFast:
    """A BERT-style WordPiece tokenizer trained on ``texts`` (cached per process by content)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    key = hashlib.sha256("\n".join(texts).encode() + str(vocab_size).encode()).hexdigest()
    if key in _tokenizer_cache:
        return _tokenizer_cache[key]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=_SPECIAL_TOKENS, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]",
        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
    )
    _tokenizer_cache[key] = fast
    return fast


def check_model_name(name: str) -> None:
    """Raise :class:`ModelNotFoundError` unless ``name`` can be loaded; reads configs, not weights."""
    if name in PRESETS:
        return
    if Path(name).is_dir():
        if not (Path(name) / "config.json").is_file():
            raise ModelNotFoundError(f"model directory {name} has no config.json; point at a directory saved with save_pretrained")
        return
    if Path(name).exists() or name.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"model {name!r} is not a directory; pass a directory saved with save_pretrained or a preset ({', '.join(PRESETS)})")
    try:
        AutoConfig.from_pretrained(name)
    except (OSError, ValueError):
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        why = "HF_HUB_OFFLINE is set" if offline else "it is not on the hub or the hub cannot be reached"
        raise ModelNotFoundError(
            f"model {name!r} could not be loaded ({why}); use a preset ({', '.join(PRESETS)}) "
            "or a local directory saved with save_pretrained"
        ) from None


def load_model(
    name: str, label_names: Sequence[str], train_texts: Sequence[str]
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The classification model and tokenizer for ``name``, with a head of ``len(label_names)``."""
    id2label = dict(enumerate(label_names))
    label2id = {label: i for i, label in id2label.items()}
    if name in PRESETS:
        tokenizer = train_wordpiece_tokenizer(train_texts)
        config = PRESETS[name](len(tokenizer))
        config.num_labels, config.id2label, config.label2id = len(label_names), id2label, label2id
        model = AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa")
        return model, tokenizer
    check_model_name(name)
    tokenizer = AutoTokenizer.from_pretrained(name)
    model = AutoModelForSequenceClassification.from_pretrained(
        name, num_labels=len(label_names), id2label=id2label, label2id=label2id, ignore_mismatched_sizes=True,
    )
    return model, tokenizer
