"""Everything a trial trains with, built from its config: model, forward, batches, optimizer, step.

Kept apart from the loop so the loop reads as training only, and so other callers
(``hpo.check``) build the very same step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from trial_executor._config import TrainConfig
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
    PaddingMaskForward,
    apply_lora,
    load_model,
    parameter_counts,
    select_forward,
    supports_packed_forward,
    usable_positions,
    uses_token_types,
)
from trial_executor.precision import PrecisionPolicy
from trial_executor.train._captured import CapturedStep
from trial_executor.train._compiled import CompiledStep
from trial_executor.train._optimizer import LearningRateSchedule, lr_lambda, make_optimizer, warmup_steps
from trial_executor.train._step import TrainStep


def make_forward(
    model: PreTrainedModel, config: TrainConfig, knobs: Knobs
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The training forward (maybe compiled) and the evaluation forward (never compiled: other shapes)."""
    forward = select_forward(
        model, packed=knobs.packed_forward, varlen=knobs.varlen_attention, static_shapes=knobs.compile_step,
        gradient_checkpointing=config.gradient_checkpointing,
    )
    if not knobs.torch_compile:
        return forward, forward
    if knobs.compile_mode == "reduce-overhead":
        # One graph per bucket width (and the last, smaller batch): allow that many before giving up.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 32)
    compiled = torch.compile(forward, mode=knobs.compile_mode, dynamic=knobs.compile_dynamic)
    return compiled, forward


@dataclass
class StepParts:
    """A model's training step as a trial builds it: the per-device knobs, forwards, optimizer, scheduler."""

    knobs: Knobs
    forward: Callable[..., Any]
    eval_forward: Callable[..., Any]
    optimizer: torch.optim.Optimizer
    scheduler: LearningRateSchedule
    train_step: TrainStep


def build_step(model: PreTrainedModel, config: TrainConfig, device: torch.device, policy: PrecisionPolicy, total_steps: int) -> StepParts:
    """The training step for ``model`` (already on ``device``) under ``config``: what every trial trains with.

    ``hpo.check`` and the benchmarks build theirs here too, so their figures are a trial's.
    """
    total_params = parameter_counts(model)[1]
    knobs = resolve_knobs(
        config, device, packed_supported=supports_packed_forward(model), total_params=total_params,
        padding_mask_forward=PaddingMaskForward.applies(model),
    )
    forward, eval_forward = make_forward(model, config, knobs)
    if knobs.master_weights:  # before the optimizer: it updates the float32 masters, the model's own parameters
        policy.keep_master_weights(model)
    skipped = policy.skipped_count()
    optimizer = make_optimizer(
        model, config, device, capturable=knobs.compile_mode == "reduce-overhead", compiled=knobs.compile_step,
        rate_on_device=skipped is not None,
    )
    factor = lr_lambda(config.lr_schedule, warmup_steps(config.warmup_ratio, total_steps), total_steps)
    scheduler = LearningRateSchedule(optimizer, config.learning_rate, factor, total_steps, skipped)
    step_type = (CapturedStep if knobs.capture_step else CompiledStep) if knobs.compile_step else TrainStep
    train_step = step_type(model, forward, optimizer, scheduler, policy, max_grad_norm=config.max_grad_norm, device=device)
    return StepParts(knobs, forward, eval_forward, optimizer, scheduler, train_step)


@dataclass
class TrialParts:
    """A built trial: what the loop drives."""

    model: PreTrainedModel
    tokenizer: Any
    policy: PrecisionPolicy
    step_parts: StepParts
    tokens: TokenizedData
    batches: TrainBatches
    eval_collation: Collation
    micro_per_epoch: int
    total_steps: int
    trainable_params: int
    total_params: int

    @property
    def knobs(self) -> Knobs:
        return self.step_parts.knobs

    @property
    def train_step(self) -> TrainStep:
        return self.step_parts.train_step


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


def _total_steps(config: TrainConfig, micro_per_epoch: int) -> int:
    total_steps = config.epochs * math.ceil(micro_per_epoch / config.grad_accum_steps)
    return total_steps if config.max_steps is None else min(total_steps, config.max_steps)


def build_trial(
    config: TrainConfig, data: TextClassificationData, device: torch.device, policy: PrecisionPolicy, source: ModelSource | None = None
) -> TrialParts:
    """Build ``config``'s model, tokens, step and batches on ``device`` (seed first).

    ``source`` is ``config.model`` resolved already (the trial's one check of the name); ``None``: resolved here.
    """
    config.stop_metric(data.task)  # an unmeasured early-stopping metric fails before any work
    model, tokenizer = load_model(source or config.model, data.label_names, data.train_texts, data.task)
    if config.finetune == "lora":
        model = apply_lora(model, config)  # adapters injected in place; the model keeps its class
    trainable_params, total_params = parameter_counts(model)
    model.to(device).train()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    max_positions = min(usable_positions(model.config) or 512, tokenizer.model_max_length)
    tokens = tokenize_data(
        tokenizer, data, config.max_length, percentile=config.max_length_percentile,
        max_positions=max_positions, cache_dir=config.cache_dir, token_types=uses_token_types(model),
    )
    micro_per_epoch = math.ceil(len(tokens.train) / config.batch_size)
    total_steps = _total_steps(config, micro_per_epoch)
    step_parts = build_step(model, config, device, policy, total_steps)
    batches = TrainBatches(
        tokens.train, config.batch_size, _collation(config, step_parts.knobs, tokens, pad_id, device), length_grouping=config.length_grouping,
        chunk_by_length=step_parts.knobs.chunk_by_length, num_workers=config.num_workers,
        persistent_workers=config.persistent_workers, prefetch_factor=config.prefetch_factor,
    )
    return TrialParts(
        model, tokenizer, policy, step_parts, tokens, batches, Collation(pad_id, packed=step_parts.knobs.packed_forward),
        micro_per_epoch, total_steps, trainable_params, total_params,
    )
