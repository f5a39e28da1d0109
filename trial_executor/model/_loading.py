"""Models and tokenizers: tiny random-init presets, or any ``from_pretrained`` source.

Presets build their model with ``from_config`` and a WordPiece tokenizer trained on the
trial's own training texts with the ``tokenizers`` library, so demos and tests need no
network. Anything else is a hub id or a local directory loaded with ``from_pretrained``.
Both take the name as :func:`~trial_executor.model._source.resolve_model` resolved it (or a
name, resolved on the spot).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence

from transformers import AutoModelForSequenceClassification, PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from trial_executor._caches import BoundedCache
from trial_executor.model._pretrained_cache import PRETRAINED
from trial_executor.model._source import PRESETS, ModelSource, resolve_model

_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

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



# The HF head's loss per task: cross-entropy, MSE, BCE-with-logits. Set at load, never left None:
# HF's first forward would set it, failing the guards of a graph compiled before (issue 23).
_PROBLEM_TYPES = {"classification": "single_label_classification", "regression": "regression", "multi_label": "multi_label_classification"}


def problem_type(task: str, num_labels: int) -> str | None:
    """What HF's first forward would set ``config.problem_type`` to for ``task`` (``None``: one class, HF decides)."""
    if task == "classification" and num_labels < 2:
        return None
    return _PROBLEM_TYPES[task]


def load_model(
    model: str | ModelSource, label_names: Sequence[str], train_texts: Sequence[str], task: str = "classification"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The sequence-classification model and tokenizer for ``model``, with a head of ``len(label_names)``.

    ``model`` is a name (checked here: :class:`~trial_executor.ModelNotFoundError`) or a source
    :func:`~trial_executor.model._source.resolve_model` checked already.
    ``task`` (see :class:`~trial_executor.TextClassificationData`) sets the head's loss.
    Weights are always float32 master weights, whatever dtype the checkpoint was saved in
    (transformers would otherwise load a float16 or bfloat16 checkpoint as it is): autocast
    decides the compute precision, never the file. Pretrained models are read from disk once per
    process (:mod:`trial_executor.model._pretrained_cache`); each call gets a fresh copy. Presets are
    built anew each call: their seeded random initialisation is the trial's own.
    """
    model = resolve_model(model)
    id2label = dict(enumerate(label_names))
    label2id = {label: i for i, label in id2label.items()}
    problem = problem_type(task, len(label_names))
    if not model.preset:
        return PRETRAINED.fresh(model, label_names, problem)
    tokenizer = train_wordpiece_tokenizer(train_texts)
    config = PRESETS[model.name](len(tokenizer))
    config.num_labels, config.id2label, config.label2id = len(label_names), id2label, label2id
    config.problem_type = problem
    return AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa"), tokenizer


def preload_model(model: str | ModelSource, label_names: Sequence[str], task: str = "classification") -> None:
    """Read a pretrained model and tokenizer into the process's cache now (presets: nothing to read).

    Called before a trial's memory window opens: the cached copy is the worker's, not the trial's.
    """
    model = resolve_model(model)
    if not model.preset:
        PRETRAINED.warm(model, label_names, problem_type(task, len(label_names)))
