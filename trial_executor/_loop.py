"""The training loop: one config and one dataset in, one :class:`TrialResult` out.

Reads top to bottom: resolve precision, build the model (LoRA adapters, gradient
checkpointing), tokenize, train with accumulation and clipping, evaluate every ``eval_every``
optimizer steps and at the end, report each evaluation to the caller, who may stop the run
(pruning), and stop by itself once the evaluation metric stops improving (early stopping).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trial_executor._batching import TrainBatches, to_device, token_counts
from trial_executor._checkpoint import (
    Checkpointing,
    TrialInterrupted,
    load_checkpoint,
    restore_rng_states,
    rng_states,
    save_checkpoint,
)
from trial_executor._config import CHUNKING_MIN_PARAMS, TrainConfig
from trial_executor._data import TextClassificationData
from trial_executor._evaluation import evaluate
from trial_executor._failures import NonFiniteLossError, TrialOutOfMemoryError
from trial_executor._hardware import peak_memory_mb, release_memory, reset_peak_memory, resolve_device
from trial_executor._lora import apply_lora, load_trainable_state_dict, parameter_counts, trainable_state_dict
from trial_executor._models import load_model
from trial_executor._optimizer import lr_lambda, make_optimizer
from trial_executor._packed import PackedBertClassifier, supports_packed_forward
from trial_executor._precision import PrecisionPolicy
from trial_executor._result import TrialResult
from trial_executor._saving import save_final_model
from trial_executor._tokenization import tokenize_data

ReportFn = Callable[[int, dict[str, float]], bool]
"""``report(step, metrics)`` is called after each evaluation and returns True to stop the run."""


@dataclass(frozen=True)
class StepProgress:
    """Where a run stands, for a progress display: sent after optimizer steps, at most twice a second."""

    step: int
    total_steps: int
    train_loss: float  # mean over the micro-batches since the last evaluation
    samples_per_s: float  # training samples per second of training time so far


ProgressFn = Callable[[StepProgress], None]

# Reading the loss on the host syncs a GPU; there it is checked every few optimizer steps.
_FINITE_CHECK_EVERY = {"cpu": 1, "cuda": 8}
STOPPED_PRUNED, STOPPED_EARLY_STOPPING = "pruned", "early_stopping"
# Reading the loss for a progress update syncs a GPU too: at most this often, and at the last step.
_PROGRESS_EVERY_S = 0.5


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _is_oom(err: BaseException) -> bool:
    # The CPU allocator reports exhaustion as a plain RuntimeError.
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(err, RuntimeError) and "can't allocate memory" in str(err)
    )


def run_trial(
    config: TrainConfig,
    data: TextClassificationData,
    report: ReportFn | None = None,
    *,
    checkpointing: Checkpointing | None = None,
    stop_requested: Callable[[], bool] | None = None,
    progress: ProgressFn | None = None,
) -> TrialResult:
    """Train ``config.model`` on ``data`` and evaluate it on the validation split.

    With ``checkpointing``, the run saves its state at each evaluation and resumes from
    ``checkpointing.resume_from`` when given. ``stop_requested`` is polled after each optimizer
    step; when it returns True the run saves a checkpoint and raises :class:`TrialInterrupted`.
    ``progress`` receives a :class:`StepProgress` now and then, and after the last step.

    Raises :class:`~trial_executor.UnsupportedPrecisionError` before any work when the
    device cannot run ``config.fp_precision``; :class:`~trial_executor.NonFiniteLossError` when
    the loss diverges; :class:`~trial_executor.TrialOutOfMemoryError` when memory runs out. Both
    are raised after the trial's memory is released, so the next trial starts clean.
    """
    device = resolve_device(config.device)
    policy = PrecisionPolicy.resolve(config.fp_precision, device)
    policy.apply_global_state(cudnn_benchmark=config.cudnn_benchmark)
    failure: Exception | None = None
    try:
        return _train(config, data, report, device, policy, checkpointing, stop_requested, progress)
    except NonFiniteLossError as err:
        failure = NonFiniteLossError(err.step, err.detail)
    except TrialInterrupted as err:
        failure = TrialInterrupted(err.step, err.checkpoint)
    except Exception as err:
        if not _is_oom(err):
            raise
        failure = TrialOutOfMemoryError(
            config.batch_size, config.grad_accum_steps,
            f"out of memory at batch_size {config.batch_size} on {device.type}: {type(err).__name__}: {str(err)[:200]}",
        )
    finally:
        # _train's model, optimizer and batches are unreachable once it returns.
        release_memory(device)
    # Raised outside the except blocks: a chained exception's traceback would keep _train's
    # frames, and with them the model and optimizer, alive.
    raise failure


@dataclass
class _Progress:
    """The run's position and counters: what a checkpoint needs besides the tensors' states."""

    step: int = 0
    epoch: int = 0
    next_batch: int = 0  # micro-batches of the current epoch already trained on
    epoch_rng: torch.Tensor | None = None  # batch-order generator state when the epoch began
    samples: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    loss_sum: float = 0.0
    loss_count: int = 0
    # The float32 loss sum of an interrupted evaluation window: a resumed run adds to it in
    # float32, as the uninterrupted run would, so its train_loss comes out bit for bit the same.
    window_loss: float = 0.0
    skipped_in_a_row: int = 0
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    best_score: float | None = None  # early stopping: the best metric so far (signed: higher is better)
    evals_since_best: int = 0


def _train(
    config: TrainConfig, data: TextClassificationData, report: ReportFn | None, device: torch.device, policy: PrecisionPolicy,
    checkpointing: Checkpointing | None, stop_requested: Callable[[], bool] | None, progress: ProgressFn | None,
) -> TrialResult:
    seed_everything(config.seed)
    model, tokenizer = load_model(config.model, data.label_names, data.train_texts)
    if config.finetune == "lora":
        model = apply_lora(model, config)  # adapters injected in place; the model keeps its class
    trainable_params, total_params = parameter_counts(model)
    model.to(device).train()
    packed = config.packed_forward and supports_packed_forward(model)
    if config.gradient_checkpointing and not packed:
        model.activation_checkpointing_enable({"use_reentrant": False})
    forward: Callable[..., Any] = (
        PackedBertClassifier(model, gradient_checkpointing=config.gradient_checkpointing) if packed else model
    )
    if config.torch_compile:
        forward = torch.compile(forward, dynamic=True)
    chunk_by_length = config.chunk_by_length
    if chunk_by_length is None:
        # Packed, only the attention product is padded: chunks would save little and cost calls.
        chunk_by_length = not packed and total_params >= CHUNKING_MIN_PARAMS
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    max_positions = min(getattr(model.config, "max_position_embeddings", 512), tokenizer.model_max_length)
    tokens = tokenize_data(
        tokenizer, data, config.max_length, percentile=config.max_length_percentile,
        max_positions=max_positions, cache_dir=config.cache_dir,
    )
    train_split, valid_split = tokens.train, tokens.valid

    micro_per_epoch = math.ceil(len(train_split) / config.batch_size)
    total_steps = config.epochs * math.ceil(micro_per_epoch / config.grad_accum_steps)
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    optimizer = make_optimizer(model, config, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(config.lr_schedule, round(config.warmup_ratio * total_steps), total_steps)
    )
    scaler = policy.grad_scaler()
    check_every = _FINITE_CHECK_EVERY.get(device.type, 1)
    generator = torch.Generator().manual_seed(config.seed)
    batches = TrainBatches(
        train_split, config.batch_size, pad_id, length_grouping=config.length_grouping, chunk_by_length=chunk_by_length,
        num_workers=config.num_workers, pin_memory=config.pin_memory, persistent_workers=config.persistent_workers,
        prefetch_factor=config.prefetch_factor,
    )
    # Early stopping: higher is better once the metric is signed (loss is minimised).
    stop_metric = config.early_stopping_metric or "accuracy"
    stop_sign = -1.0 if stop_metric == "loss" else 1.0
    run = _Progress()

    def checkpoint() -> Path | None:
        if checkpointing is None:
            return None
        state = {
            "config": config.to_dict(), "data_fingerprint": data.fingerprint, "step": run.step,
            "progress": dataclasses.asdict(run), "rng": rng_states(),
            # LoRA: the frozen weights are rebuilt from the model's source; only what trains is saved.
            "model": trainable_state_dict(model) if config.finetune == "lora" else model.state_dict(),
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict() if scaler else None,
        }
        return save_checkpoint(state, checkpointing)

    resumed_at: int | None = None
    if checkpointing is not None and checkpointing.resume_from is not None:
        state = load_checkpoint(checkpointing.resume_from, config.to_dict(), data.fingerprint)
        if config.finetune == "lora":
            load_trainable_state_dict(model, state["model"])
        else:
            model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaler:
            scaler.load_state_dict(state["scaler"])
        run = _Progress(**state["progress"])
        restore_rng_states(state["rng"])
        resumed_at = run.step

    train_loss = torch.full((), run.window_loss, device=device)
    stopped: str | None = None  # STOPPED_PRUNED or STOPPED_EARLY_STOPPING
    reset_peak_memory(device)
    tick = shown = time.perf_counter()
    while run.step < total_steps and not stopped:
        if run.epoch_rng is None:
            run.epoch_rng = generator.get_state()
        generator.set_state(run.epoch_rng)
        for i, chunks in enumerate(batches.epoch(generator, start=run.next_batch), start=run.next_batch):
            # The loss is a mean over the accumulation window's batches, and over each batch's
            # rows: a chunk's mean loss counts by its share of the batch.
            window_start = i - i % config.grad_accum_steps
            window = min(config.grad_accum_steps, micro_per_epoch - window_start)
            rows = sum(chunk["labels"].numel() for chunk in chunks)
            for chunk in chunks:
                # Counted on the host: reading a device tensor here would sync every micro-step.
                n = chunk["labels"].numel()
                real, processed = token_counts(chunk)
                run.samples, run.tokens, run.padded_tokens = run.samples + n, run.tokens + real, run.padded_tokens + processed
                chunk = to_device(chunk, device)
                with policy.autocast():
                    loss = forward(**chunk).loss
                weight = n / rows / window
                (scaler.scale(loss * weight) if scaler else loss * weight).backward()
                train_loss += loss.detach() * (n / rows)
            run.loss_count += 1
            if i + 1 < window_start + window:
                continue

            if scaler:
                scale = scaler.get_scale()
                scaler.unscale_(optimizer)
            if config.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            if scaler:
                scaler.step(optimizer)
                scaler.update()
                # The scale drops only when inf/NaN gradients made GradScaler skip the step.
                run.skipped_in_a_row = run.skipped_in_a_row + 1 if scaler.get_scale() < scale else 0
                if run.skipped_in_a_row > config.max_skipped_steps:
                    raise NonFiniteLossError(
                        run.step,
                        f"fp16 gradients were inf/NaN for {run.skipped_in_a_row} optimizer steps in a row (GradScaler skipped them)",
                    )
            else:
                optimizer.step()
                if (run.step + 1) % check_every == 0 and not torch.isfinite(train_loss):
                    raise NonFiniteLossError(
                        run.step, f"{policy.name} training loss is {train_loss.item()} by optimizer step {run.step + 1}"
                    )
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            run.step += 1
            run.next_batch = i + 1

            last = run.step >= total_steps
            now = time.perf_counter()
            if progress is not None and (last or run.step == 1 or now - shown >= _PROGRESS_EVERY_S):
                shown = now
                seconds = run.train_seconds + now - tick
                loss = (run.loss_sum + train_loss.item()) / max(1, run.loss_count)
                progress(StepProgress(run.step, total_steps, loss, run.samples / seconds if seconds > 0 else 0.0))
            evaluate_now = last or (config.eval_every and run.step % config.eval_every == 0)
            interrupted = not last and stop_requested is not None and stop_requested()
            if evaluate_now or interrupted:
                _sync(device)
                run.train_seconds += time.perf_counter() - tick
            if interrupted:
                run.window_loss = train_loss.item()
            if evaluate_now:
                run.loss_sum += train_loss.item()
                train_loss.zero_()
                tock = time.perf_counter()
                metrics = evaluate(model, forward, valid_split, policy, config, pad_id, data.num_labels, device)
                metrics["train_loss"] = run.loss_sum / max(1, run.loss_count)
                run.loss_sum, run.loss_count = 0.0, 0
                run.history.append((run.step, dict(metrics)))
                if report and report(run.step, dict(metrics)):
                    stopped = STOPPED_PRUNED
                elif config.early_stopping_patience is not None:
                    score = stop_sign * metrics[stop_metric]
                    if run.best_score is None or score > run.best_score:
                        run.best_score, run.evals_since_best = score, 0
                    else:
                        run.evals_since_best += 1
                    if run.evals_since_best >= config.early_stopping_patience and not last:
                        stopped = STOPPED_EARLY_STOPPING
                run.eval_seconds += time.perf_counter() - tock
                if not (last or stopped or interrupted):
                    checkpoint()
            if interrupted:
                raise TrialInterrupted(run.step, checkpoint())
            if evaluate_now:
                tick = time.perf_counter()
            if last or stopped:
                break
        else:
            run.epoch, run.next_batch, run.epoch_rng = run.epoch + 1, 0, None

    if checkpointing is not None and checkpointing.final_model is not None and stopped != STOPPED_PRUNED:
        save_final_model(model, tokenizer, checkpointing.final_model, lora=config.finetune == "lora")
    history = run.history
    return TrialResult(
        metrics=history[-1][1],
        history=history,
        steps=run.step,
        stopped_early=stopped == STOPPED_PRUNED,
        stopped_reason=stopped,
        precision_effective=policy.name,
        throughput_samples_per_s=run.samples / run.train_seconds if run.train_seconds else 0.0,
        throughput_tokens_per_s=run.tokens / run.train_seconds if run.train_seconds else 0.0,
        peak_memory_mb=peak_memory_mb(device),
        train_seconds=run.train_seconds,
        eval_seconds=run.eval_seconds,
        used_grad_scaler=scaler is not None,
        padding_efficiency=run.tokens / run.padded_tokens if run.padded_tokens else 1.0,
        tokenize_seconds=tokens.seconds,
        tokenize_cache_hit=tokens.cache_hit,
        packed_forward=packed,
        resumed_at_step=resumed_at,
        max_length=tokens.max_length,
        truncated_fraction=tokens.truncated_fraction,
        trainable_params=trainable_params,
        trainable_fraction=trainable_params / total_params,
    )
