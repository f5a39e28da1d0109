"""Pretrained weights and tokenizers read from disk once per worker process, a fresh model per trial.

A worker runs many trials of the same model. The first one loads it with ``from_pretrained``;
later ones get a deep copy of that pristine model (never a trained one: the cached copy is never
handed out), so no trial sees another's weights and none reads the model directory again.
The modules ``from_pretrained`` had to initialise (the new classification head) are initialised
again in each copy under the trial's own seeded RNG, with the model's own ``_init_weights``: a
trial starts from exactly the weights an uncached load would have given it.

The cache is keyed by the source and the label names; an entry read before the directory's
files changed (their sizes and times, the :class:`~trial_executor.model._source.ModelSource`'s
signature) is read again. It keeps the last :data:`KEEP` models (a
:class:`~trial_executor._caches.BoundedCache`), so a worker's memory does not grow with the
number of models a study tries.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import AutoModelForSequenceClassification, PreTrainedModel, PreTrainedTokenizerBase

from trial_executor._caches import BoundedCache
from trial_executor.model._source import ModelNotFoundError, ModelSource, Signature, saved_config, saved_tokenizer

KEEP = 2  # models a worker keeps; a study usually tries one or two


@dataclass(frozen=True)
class _Entry:
    model: PreTrainedModel  # pristine: never trained, never handed out
    tokenizer: PreTrainedTokenizerBase
    initialised: tuple[str, ...]  # modules from_pretrained initialised (not in the checkpoint)
    signature: Signature  # the directory's files when it was read


def _from_pretrained(source: str, label_names: Sequence[str], problem_type: str | None, signature: Signature) -> _Entry:
    """Load ``source`` with a head of ``len(label_names)`` for ``problem_type``, in float32 master weights (see ``load_model``)."""
    id2label = dict(enumerate(label_names))
    kwargs = {
        "num_labels": len(label_names), "id2label": id2label, "label2id": {label: i for i, label in id2label.items()},
        "ignore_mismatched_sizes": True, "dtype": torch.float32, "problem_type": problem_type, "output_loading_info": True,
    }
    try:
        model, info = AutoModelForSequenceClassification.from_pretrained(source, attn_implementation="sdpa", **kwargs)
    except (ValueError, ImportError):
        # Architectures without an SDPA implementation keep their own attention.
        model, info = AutoModelForSequenceClassification.from_pretrained(source, **kwargs)
    missing = set(info["missing_keys"]) | {key for key, *_ in info["mismatched_keys"]}
    initialised = tuple(sorted({key.rpartition(".")[0] for key in missing}))
    saved = [str(name) for _, name in sorted((saved_config(source, signature).id2label or {}).items())]
    order = _head_order(saved, label_names)
    if order is not None:
        _reorder_head(model, order, source, initialised, saved)
    tokenizer = saved_tokenizer(source, signature)
    if model.config.pad_token_id is None:  # GPT-style heads pool the last token before the padding: they must know it
        model.config.pad_token_id = tokenizer.pad_token_id  # the directory check refused a tokenizer without one
    # A private copy: weights loaded from safetensors may be pages of the file, which the trial's
    # memory window would count when a later copy first touches them.
    return _Entry(copy.deepcopy(model), tokenizer, initialised, signature)


def _head_order(saved: list[str], label_names: Sequence[str]) -> list[int] | None:
    """Where each of ``label_names`` sits in the checkpoint's head (its ``saved`` labels, in id order) when it was trained
    for the same labels in another order (``None`` otherwise: other labels, default ``LABEL_i`` names, or the same order)."""
    if saved == list(label_names) or sorted(saved) != sorted(label_names):
        return None
    return [saved.index(name) for name in label_names]


def _reorder_head(model: PreTrainedModel, order: list[int], source: str, initialised: tuple[str, ...], saved: list[str]) -> None:
    """The head's output rows put in the data's label order, so each output keeps the label it was trained for.

    from_pretrained names the outputs after the data (``id2label``) but loads the rows as saved: a
    head saved for ``[pos, neg]`` and loaded for ``[neg, pos]`` would predict each class as the other.
    """
    outputs = [
        (name, module) for name, module in model.named_modules()
        if not name.startswith(model.base_model_prefix) and isinstance(module, torch.nn.Linear) and module.out_features == len(order)
    ]
    if len(outputs) == 1 and outputs[0][0] in initialised:
        return  # not in the checkpoint: a new head, in the data's order from the start
    if len(outputs) != 1:
        raise ModelNotFoundError(
            f"model directory {source} has a head trained for labels {saved} "
            "in another order than the data's, and its output layer cannot be told apart to reorder; "
            "save the checkpoint with its labels in sorted order"
        )
    output, index = outputs[0][1], torch.tensor(order)
    with torch.no_grad():
        output.weight.copy_(output.weight[index])
        if output.bias is not None:
            output.bias.copy_(output.bias[index])


class PretrainedCache:
    """The last :data:`KEEP` pretrained models and tokenizers this process loaded; ``loads`` and ``hits`` count."""

    def __init__(self, keep: int = KEEP, name: str = "model.pretrained") -> None:
        self.loads = 0
        self.hits = 0
        self._entries: BoundedCache[tuple[object, ...], _Entry] = BoundedCache(name, size=keep)

    def _cached(self, model: ModelSource, label_names: Sequence[str], problem_type: str | None) -> tuple[tuple[object, ...], _Entry | None]:
        """The key for these arguments and its entry, ``None`` unless kept from the directory as ``model`` saw it."""
        key = (model.path, tuple(label_names), problem_type)
        entry = self._entries.get(key)
        return key, entry if entry is not None and entry.signature == model.signature else None

    def _entry(self, model: ModelSource, label_names: Sequence[str], problem_type: str | None) -> _Entry:
        key, entry = self._cached(model, label_names, problem_type)
        if entry is not None:
            self.hits += 1
            return entry
        self.loads += 1
        self._entries.pop(key)  # a stale version (the directory was saved again) goes before the new one comes
        return self._entries.put(key, _from_pretrained(model.path, label_names, problem_type, model.signature))

    def warm(self, model: ModelSource, label_names: Sequence[str], problem_type: str | None = None) -> None:
        """Load ``model`` now (outside a trial's memory window) unless it is cached; counts no hit."""
        if self._cached(model, label_names, problem_type)[1] is None:
            self._entry(model, label_names, problem_type)

    def fresh(
        self, model: ModelSource, label_names: Sequence[str], problem_type: str | None = None
    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """A new copy of ``model``'s pretrained model (head initialised from the current RNG) and the tokenizer."""
        entry = self._entry(model, label_names, problem_type)
        copied = copy.deepcopy(entry.model)
        for name in entry.initialised:
            module = copied.get_submodule(name)
            # The same calls from_pretrained made for these modules, so the same draws from the RNG.
            copied._init_weights(module)
        return copied, entry.tokenizer

    def clear(self) -> None:
        self._entries.clear()  # clear_caches() does the same for every cache


PRETRAINED = PretrainedCache()
"""The process's cache: every ``from_pretrained`` model a trial uses comes through it."""
