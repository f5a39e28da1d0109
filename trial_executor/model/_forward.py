"""The forward a trial trains through: the HF model itself, the packed BERT forward, or the HF model with a 4D mask.

:func:`select_forward` is the one choice among them; compiling it is the training step's business
(:func:`trial_executor.train._build.make_forward`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from transformers import PreTrainedModel

from trial_executor.model._packed import PackedBertClassifier


def uses_token_types(model: PreTrainedModel) -> bool:
    """Whether ``model`` embeds token types (BERT: 0 for a pair's first text, 1 for the second)."""
    takes_them = "token_type_ids" in inspect.signature(model.forward).parameters
    return takes_them and getattr(model.config, "type_vocab_size", 0) >= 2


# Architectures whose HF forward uses the padding mask for attention only (a 4D mask is then the same
# function): each passes it to transformers' create_bidirectional_mask, which returns a 4D mask as it
# is, and its classification head reads the first token (transformers 5.23). Not ModernBERT: its
# head pools with the 2D mask and it builds a sliding-window mask from it; not DeBERTa-v2, whose
# mask is its own and whose loss calls nonzero().
_MASK_ONLY_FOR_ATTENTION = ("bert", "distilbert", "roberta", "xlm-roberta", "electra", "albert")


class PaddingMaskForward:
    """The HF model, its padding mask handed over as a ``(batch, 1, 1, width)`` boolean attention mask.

    Given a 2D mask, transformers tests ``mask.all()`` every forward to skip masking: a device
    read that makes the host wait for the GPU each step. A 4D mask is used as it is; it
    broadcasts over heads and queries in ``scaled_dot_product_attention``.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model

    @staticmethod
    def applies(model: PreTrainedModel) -> bool:
        config = model.config
        return config.model_type in _MASK_ONLY_FOR_ATTENTION and getattr(config, "_attn_implementation", None) == "sdpa"

    def __call__(self, attention_mask: torch.Tensor, **inputs: torch.Tensor) -> Any:
        return self.model(attention_mask=attention_mask.bool()[:, None, None, :], **inputs)


def enable_activation_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each layer's activations in the backward (non-reentrant ``torch.utils.checkpoint``).

    transformers 5.x renamed ``gradient_checkpointing_enable`` (5.17, the GPU image's version, has
    only that name) to ``activation_checkpointing_enable`` (5.24 warns on the old name): the one
    it has is called, with the same positional kwargs dict.
    """
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable({"use_reentrant": False})


def select_forward(
    model: PreTrainedModel, *, packed: bool, varlen: bool, static_shapes: bool, gradient_checkpointing: bool
) -> Callable[..., Any]:
    """``model``'s training forward: packed (BERT/DistilBERT, when ``packed``), a 4D padding mask where it is the
    same function (:class:`PaddingMaskForward`), else the HF model; with gradient checkpointing when asked."""
    if packed:
        return PackedBertClassifier(model, gradient_checkpointing=gradient_checkpointing, varlen=varlen, static_shapes=static_shapes)
    if gradient_checkpointing:
        enable_activation_checkpointing(model)
    return PaddingMaskForward(model) if PaddingMaskForward.applies(model) else model
