"""Everything a trial trains with, built from its config: model, forward, batches, optimizer, step.

Kept apart from the loop so the loop reads as training only, and so other callers
(``hpo.check``) build the very same step.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from trial_executor._config import TASK_METRICS, TrainConfig
from trial_executor.batches import (
    Collation,
    StaticCollation,
    TokenizedData,
    TrainBatches,
    packed_width,
    token_buckets,
    tokenize_data,
    width_buckets,
)
from trial_executor.data import TextClassificationData
from trial_executor.device import Knobs, resolve_knobs
from trial_executor.model import (
    ModelSource,
    PackedBertClassifier,
    apply_lora,
    load_model,
    parameter_counts,
    supports_packed_forward,
)
from trial_executor.precision import PrecisionPolicy
from trial_executor.train._compiled import CompiledStep
from trial_executor.train._optimizer import lr_lambda, make_optimizer
from trial_executor.train._step import TrainStep


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


def make_forward(
    model: PreTrainedModel, config: TrainConfig, knobs: Knobs
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The training forward (maybe compiled) and the evaluation forward (never compiled: other shapes)."""
    if config.gradient_checkpointing and not knobs.packed_forward:
        model.activation_checkpointing_enable({"use_reentrant": False})
    forward: Callable[..., Any] = model
    if knobs.packed_forward:
        forward = PackedBertClassifier(
            model, gradient_checkpointing=config.gradient_checkpointing, varlen=knobs.varlen_attention, static_shapes=knobs.compile_step,
        )
    elif PaddingMaskForward.applies(model):
        forward = PaddingMaskForward(model)
    if not knobs.torch_compile:
        return forward, forward
    if knobs.compile_mode == "reduce-overhead":
        # One graph per bucket width (and the last, smaller batch): allow that many before giving up.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 32)
    compiled = torch.compile(forward, mode=knobs.compile_mode, dynamic=knobs.compile_dynamic)
    return compiled, forward


@dataclass
class TrialParts:
    """A built trial: what the loop drives."""

    model: PreTrainedModel
    tokenizer: Any
    forward: Callable[..., Any]
    eval_forward: Callable[..., Any]
    knobs: Knobs
    tokens: TokenizedData
    batches: TrainBatches
    eval_collation: Collation
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None
    step: TrainStep
    micro_per_epoch: int
    total_steps: int
    trainable_params: int
    total_params: int


def _collation(config: TrainConfig, knobs: Knobs, tokens: TokenizedData, pad_id: int, device: torch.device) -> Collation:
    """How training batches are padded: dynamic (maybe up to width buckets), or static shapes for a compiled step."""
    pin = device.type == "cuda"  # pinned on CUDA always (the step's copies are asynchronous); nothing to pin for on the CPU
    if not knobs.compile_step:
        buckets = width_buckets(tokens.max_length) if knobs.buckets else None
        return Collation(pad_id, buckets=buckets, packed=knobs.packed_forward, pin=pin)
    if not knobs.packed_forward:
        return StaticCollation(pad_id, buckets=width_buckets(tokens.max_length), pin=pin, rows=config.batch_size)
    sizes = token_buckets(tokens.train, config.batch_size, length_grouping=config.length_grouping, seed=config.seed)
    return StaticCollation(
        pad_id, buckets=(packed_width(tokens.max_length),), packed=True, pin=pin, rows=config.batch_size, token_buckets=sizes,
    )


def build_trial(
    config: TrainConfig, data: TextClassificationData, device: torch.device, policy: PrecisionPolicy, source: ModelSource | None = None
) -> TrialParts:
    """Build ``config``'s model, forward, batches, optimizer and step on ``device`` (seed first).

    ``source`` is ``config.model`` resolved already (the trial's one check of the name); ``None``: resolved here.
    """
    measured = TASK_METRICS[data.task]
    if config.early_stopping_metric is not None and config.early_stopping_metric not in measured:
        raise ValueError(
            f"early_stopping_metric {config.early_stopping_metric!r} is not measured for {data.task} data; "
            f"use one of {', '.join(measured)}"
        )
    model, tokenizer = load_model(source or config.model, data.label_names, data.train_texts, data.task)
    if config.finetune == "lora":
        model = apply_lora(model, config)  # adapters injected in place; the model keeps its class
    trainable_params, total_params = parameter_counts(model)
    model.to(device).train()
    knobs = resolve_knobs(config, device, packed_supported=supports_packed_forward(model), total_params=total_params)
    forward, eval_forward = make_forward(model, config, knobs)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    max_positions = min(getattr(model.config, "max_position_embeddings", 512), tokenizer.model_max_length)
    tokens = tokenize_data(
        tokenizer, data, config.max_length, percentile=config.max_length_percentile,
        max_positions=max_positions, cache_dir=config.cache_dir, token_types=uses_token_types(model),
    )
    batches = TrainBatches(
        tokens.train, config.batch_size, _collation(config, knobs, tokens, pad_id, device), length_grouping=config.length_grouping,
        chunk_by_length=knobs.chunk_by_length, num_workers=config.num_workers,
        persistent_workers=config.persistent_workers, prefetch_factor=config.prefetch_factor,
    )
    micro_per_epoch = math.ceil(len(tokens.train) / config.batch_size)
    total_steps = config.epochs * math.ceil(micro_per_epoch / config.grad_accum_steps)
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    optimizer = make_optimizer(
        model, config, device, capturable=knobs.compile_mode == "reduce-overhead", compiled=knobs.compile_step,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(config.lr_schedule, round(config.warmup_ratio * total_steps), total_steps)
    )
    scaler = policy.grad_scaler()
    step_type = CompiledStep if knobs.compile_step else TrainStep
    step = step_type(model, forward, optimizer, scheduler, scaler, policy, max_grad_norm=config.max_grad_norm, device=device)
    return TrialParts(
        model, tokenizer, forward, eval_forward, knobs, tokens, batches, Collation(pad_id, packed=knobs.packed_forward),
        optimizer, scheduler, scaler, step, micro_per_epoch, total_steps, trainable_params, total_params,
    )
