"""The training loop: one config and one dataset in, one :class:`TrialResult` out.

Reads top to bottom: resolve precision, build the model (LoRA adapters, gradient
checkpointing), tokenize, then per accumulation window one :class:`~trial_executor.train._step.TrainStep`
(forward, backward, clipping, optimizer step; it never waits for the device), a read of the
loss on the host every few steps (the only sync: failure checks and progress), evaluation every
``eval_every`` optimizer steps and at the end, reported to the caller, who may stop the run
(pruning); the run stops by itself once the evaluation metric stops improving (early stopping).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trial_executor._config import MINIMIZED_METRICS, TASK_METRICS, TrainConfig
from trial_executor._failures import NonFiniteLossError, TrialOutOfMemoryError
from trial_executor._result import ProgressFn, StepProgress, TrialResult
from trial_executor.batches import Batch
from trial_executor.data import TextClassificationData
from trial_executor.device import (
    HOST_LIMITED_BELOW,
    DeviceLag,
    MemoryWindow,
    TrainClock,
    bound_native_caches,
    is_oom,
    release_memory,
    resolve_device,
)
from trial_executor.model import (
    ModelSource,
    check_max_length,
    checkpoint_dtype,
    load_trainable_state_dict,
    preload_model,
    resolve_model,
    save_final_model,
    trainable_state_dict,
)
from trial_executor.precision import PrecisionPolicy
from trial_executor.train._build import TrialParts, build_trial
from trial_executor.train._checkpoint import (
    Checkpointing,
    TrialInterrupted,
    load_checkpoint,
    restore_rng_states,
    rng_states,
    save_checkpoint,
)
from trial_executor.train._compiled import release_compiled
from trial_executor.train._evaluation import eval_rows, evaluate

ReportFn = Callable[[int, dict[str, float]], bool]
"""``report(step, metrics)`` is called after each evaluation and returns True to stop the run."""


STOPPED_PRUNED, STOPPED_EARLY_STOPPING = "pruned", "early_stopping"
# Progress updates come with the host reads of the loss, at most this often, and at the last step.
_PROGRESS_EVERY_S = 0.5


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
    source = resolve_model(config.model)  # the name checked once, for the whole trial
    check_max_length(source, config.max_length)  # before any work, not as a crash mid-trial
    bound_native_caches()
    policy = PrecisionPolicy.resolve(config.fp_precision, device)
    policy.apply_global_state(cudnn_benchmark=config.cudnn_benchmark)
    failure: Exception | None = None
    try:
        return _train(config, source, data, report, device, policy, checkpointing, stop_requested, progress)
    except NonFiniteLossError as err:
        failure = NonFiniteLossError(err.step, err.detail)
    except TrialInterrupted as err:
        failure = TrialInterrupted(err.step, err.checkpoint)
    except Exception as err:
        if not is_oom(err):
            raise
        failure = TrialOutOfMemoryError(
            config.batch_size, config.grad_accum_steps,
            f"out of memory at batch_size {config.batch_size} on {device.type}: {type(err).__name__}: {str(err)[:200]}",
        )
    finally:
        # _train's model, optimizer and batches are unreachable once it returns; compiled graphs
        # and CUDA-graph pools would keep them (and their memory) alive.
        release_compiled()
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
    config: TrainConfig, source: ModelSource, data: TextClassificationData, report: ReportFn | None, device: torch.device,
    policy: PrecisionPolicy, checkpointing: Checkpointing | None, stop_requested: Callable[[], bool] | None, progress: ProgressFn | None,
) -> TrialResult:
    preload_model(source, data.label_names, data.task)  # the worker's cached copy, outside the trial's memory
    seed_everything(config.seed)
    memory = MemoryWindow.open(device)  # the trial's own peak: model, optimizer, activations, tokens
    parts = build_trial(config, data, device, policy, source)
    run, resumed_at = _Progress(), None
    if checkpointing is not None and checkpointing.resume_from is not None:
        run = _restore(parts, config, data, checkpointing.resume_from)
        resumed_at = run.step
    loop = _Loop(config, data, device, parts, run, report, checkpointing, stop_requested, progress)
    loop.train()
    if checkpointing is not None and checkpointing.final_model is not None and loop.stopped != STOPPED_PRUNED:
        save_final_model(parts.model, parts.tokenizer, checkpointing.final_model, lora=config.finetune == "lora")
    result = _result(parts, run, loop.clock, loop.lag, loop.stopped, policy, resumed_at)
    return dataclasses.replace(
        result, peak_memory_mb=memory.peak_increase_mb(), checkpoint_dtype=checkpoint_dtype(source),
        eval_sample_rows=len(loop.sample_rows),
    )


def _checkpoint_state(parts: TrialParts, config: TrainConfig, data: TextClassificationData, run: _Progress) -> dict[str, Any]:
    return {
        "config": config.to_dict(), "data_fingerprint": data.fingerprint, "step": run.step,
        "progress": dataclasses.asdict(run), "rng": rng_states(),
        # LoRA: the frozen weights are rebuilt from the model's source; only what trains is saved.
        "model": trainable_state_dict(parts.model) if config.finetune == "lora" else parts.model.state_dict(),
        "optimizer": parts.optimizer.state_dict(), "scheduler": parts.scheduler.state_dict(),
        "scaler": parts.scaler.state_dict() if parts.scaler else None,
    }


def _restore(parts: TrialParts, config: TrainConfig, data: TextClassificationData, path: Path) -> _Progress:
    state = load_checkpoint(path, config.to_dict(), data.fingerprint)
    if config.finetune == "lora":
        load_trainable_state_dict(parts.model, state["model"])
    else:
        parts.model.load_state_dict(state["model"])
    parts.optimizer.load_state_dict(state["optimizer"])
    parts.scheduler.load_state_dict(state["scheduler"])
    if parts.scaler:
        parts.scaler.load_state_dict(state["scaler"])
    run = _Progress(**state["progress"])
    restore_rng_states(state["rng"])
    parts.step.loss_sum.fill_(run.window_loss)
    return run


def _windows(
    batches: Iterator[list[Batch]], first: int, accum: int, per_epoch: int
) -> Iterator[tuple[int, list[list[Batch]]]]:
    """Group an epoch's micro-batches (from index ``first``) into accumulation windows; yields (next index, window)."""
    window: list[list[Batch]] = []
    for i, chunks in enumerate(batches, start=first):
        window.append(chunks)
        window_start = i - i % accum
        if i + 1 == min(window_start + accum, per_epoch):
            yield i + 1, window
            window = []


class _Loop:
    """The training loop's state between steps; :meth:`train` reads top to bottom."""

    def __init__(
        self, config: TrainConfig, data: TextClassificationData, device: torch.device, parts: TrialParts, run: _Progress,
        report: ReportFn | None, checkpointing: Checkpointing | None, stop_requested: Callable[[], bool] | None,
        progress: ProgressFn | None,
    ) -> None:
        self.config, self.data, self.device, self.parts, self.run = config, data, device, parts, run
        self.report, self.checkpointing, self.stop_requested, self.progress = report, checkpointing, stop_requested, progress
        self.clock = TrainClock(device, track_setup=device.type == "cuda" or parts.knobs.torch_compile or parts.knobs.compile_step)
        self.lag = DeviceLag(device)
        self.stopped: str | None = None  # STOPPED_PRUNED or STOPPED_EARLY_STOPPING
        self.shown = 0.0
        # Early stopping: higher is better once the metric is signed (loss and rmse are minimised).
        self.stop_metric = config.early_stopping_metric or TASK_METRICS[data.task][0]
        self.stop_sign = -1.0 if self.stop_metric in MINIMIZED_METRICS else 1.0
        self.sample_rows = eval_rows(len(parts.tokens.valid), config.eval_sample_size)

    def train(self) -> None:
        config, parts, run = self.config, self.parts, self.run
        generator = torch.Generator().manual_seed(config.seed)
        self.clock.start()
        self.lag.anchor()
        while run.step < parts.total_steps and not self.stopped:
            if run.epoch_rng is None:
                run.epoch_rng = generator.get_state()
            generator.set_state(run.epoch_rng)
            epoch = parts.batches.epoch(generator, start=run.next_batch)
            for next_batch, window in _windows(epoch, run.next_batch, config.grad_accum_steps, parts.micro_per_epoch):
                self._step(window)
                run.next_batch = next_batch
                last = run.step >= parts.total_steps
                evaluate_now = last or bool(config.eval_interval_steps and run.step % config.eval_interval_steps == 0)
                interrupted = not last and self.stop_requested is not None and self.stop_requested()
                if evaluate_now or interrupted or self._read_due(last):
                    self._host_read(last)
                if evaluate_now or interrupted:
                    self._pause_clock()
                if evaluate_now:
                    self._evaluate(last, interrupted)
                if interrupted:
                    run.window_loss = parts.step.read().loss_sum
                    raise TrialInterrupted(run.step, self._checkpoint())
                if evaluate_now:
                    self.clock.start()
                    self.lag.anchor()
                if last or self.stopped:
                    break
            else:
                run.epoch, run.next_batch, run.epoch_rng = run.epoch + 1, 0, None

    def _step(self, window: list[list[Batch]]) -> None:
        """One optimizer step; its first few of a new shape are timed apart as start-up cost."""
        setup = self.clock.track_setup and self.clock.is_setup(  # a shape: every input's (packed: its token bucket too)
            tuple(tuple(t.shape) for chunks in window for chunk in chunks for t in chunk.inputs.values())
        )
        began = self.clock.setup_begin() if setup else time.perf_counter()
        self.parts.step(window)
        if setup:  # synced: re-anchor the device clock
            self.clock.setup_end(began)
            self.lag.collect()
            self.lag.anchor()
        elif self.clock.steady:
            self.lag.step_done(began)
        run = self.run
        for chunks in window:
            run.loss_count += 1
            for chunk in chunks:
                run.samples += chunk.rows
                run.tokens += chunk.real_tokens
                run.padded_tokens += chunk.padded_tokens
        run.step += 1
        self.clock.stepped(sum(chunk.rows for chunks in window for chunk in chunks), setup)

    def _read_due(self, last: bool) -> bool:
        return last or self.run.step % self.parts.knobs.host_read_every == 0 or (self.progress is not None and self.run.step == 1)

    def _host_read(self, last: bool) -> None:
        """Read the step's device state (a GPU syncs here): fail on a non-finite loss, send progress."""
        run, config = self.run, self.config
        reading = self.parts.step.read()
        self.lag.collect()
        self.clock.synced()
        self.lag.anchor()
        if reading.skipped_in_a_row > config.max_skipped_steps:
            raise NonFiniteLossError(
                run.step - 1,
                f"fp16 gradients were inf/NaN for {reading.skipped_in_a_row} optimizer steps in a row (GradScaler skipped them)",
            )
        if self.parts.scaler is None and not math.isfinite(reading.loss_sum):
            precision = config.fp_precision
            raise NonFiniteLossError(run.step - 1, f"{precision} training loss is {reading.loss_sum} by optimizer step {run.step}")
        now = time.perf_counter()
        if self.progress is not None and (last or run.step == 1 or now - self.shown >= _PROGRESS_EVERY_S):
            self.shown = now
            seconds = run.train_seconds + now - self.clock.segment_started
            loss = (run.loss_sum + reading.loss_sum) / max(1, run.loss_count)
            self.progress(StepProgress(run.step, self.parts.total_steps, loss, run.samples / seconds if seconds > 0 else 0.0))

    def _pause_clock(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.lag.collect()
        self.run.train_seconds += self.clock.stop()

    def _evaluate(self, last: bool, interrupted: bool) -> None:
        run, parts, config = self.run, self.parts, self.config
        run.loss_sum += parts.step.read().loss_sum
        parts.step.loss_sum.zero_()
        tock = time.perf_counter()
        metrics = self._metrics(full=last)
        metrics["train_loss"] = run.loss_sum / max(1, run.loss_count)
        run.loss_sum, run.loss_count = 0.0, 0
        run.history.append((run.step, dict(metrics)))
        if self.report and self.report(run.step, dict(metrics)):
            self.stopped = STOPPED_PRUNED
        elif config.early_stopping_patience is not None:
            score = self.stop_sign * metrics[self.stop_metric]
            if run.best_score is None or score > run.best_score:
                run.best_score, run.evals_since_best = score, 0
            else:
                run.evals_since_best += 1
            if run.evals_since_best >= config.early_stopping_patience and not last:
                self.stopped = STOPPED_EARLY_STOPPING
        if self.stopped == STOPPED_EARLY_STOPPING and metrics["eval_rows"] < len(parts.tokens.valid):
            # The run's result is measured on every row; the sampled evaluation only decided to stop.
            run.history.append((run.step, {**self._metrics(full=True), "train_loss": metrics["train_loss"]}))
        run.eval_seconds += time.perf_counter() - tock
        if not (last or self.stopped or interrupted):
            self._checkpoint()

    def _metrics(self, *, full: bool) -> dict[str, float]:
        """Metrics on every validation row, or (early evaluations) on the fixed sample."""
        parts = self.parts
        return evaluate(
            parts.model, parts.eval_forward, parts.tokens.valid, parts.step.policy, self.config, parts.eval_collation,
            self.data.num_labels, self.device, rows=None if full else self.sample_rows,
        )

    def _checkpoint(self) -> Path | None:
        if self.checkpointing is None:
            return None
        return save_checkpoint(_checkpoint_state(self.parts, self.config, self.data, self.run), self.checkpointing)


def _result(
    parts: TrialParts, run: _Progress, clock: TrainClock, lag: DeviceLag, stopped: str | None, policy: PrecisionPolicy,
    resumed_at: int | None,
) -> TrialResult:
    overall = run.samples / run.train_seconds if run.train_seconds else 0.0
    steady = clock.steady_samples_per_s()
    samples_per_s = steady if steady is not None else overall
    busy = lag.busy_fraction()
    return TrialResult(
        metrics=run.history[-1][1],
        history=run.history,
        steps=run.step,
        stopped_early=stopped == STOPPED_PRUNED,
        stopped_reason=stopped,
        precision_effective=policy.name,
        throughput_samples_per_s=samples_per_s,
        throughput_tokens_per_s=samples_per_s * run.tokens / run.samples if run.samples else 0.0,
        peak_memory_mb=0.0,  # the caller's memory window fills it in
        train_seconds=run.train_seconds,
        eval_seconds=run.eval_seconds,
        used_grad_scaler=parts.scaler is not None,
        padding_efficiency=run.tokens / run.padded_tokens if run.padded_tokens else 1.0,
        tokenize_seconds=parts.tokens.seconds,
        tokenize_cache_hit=parts.tokens.cache_hit,
        packed_forward=parts.knobs.packed_forward,
        resumed_at_step=resumed_at,
        max_length=parts.tokens.max_length,
        truncated_fraction=parts.tokens.truncated_fraction,
        trainable_params=parts.trainable_params,
        trainable_fraction=parts.trainable_params / parts.total_params,
        throughput_all_samples_per_s=overall,
        steady_state=steady is not None,
        compile_seconds=clock.setup_seconds,
        device_busy_fraction=busy,
        host_limited=None if busy is None else busy < HOST_LIMITED_BELOW,
        buckets=parts.knobs.buckets,
        varlen_attention=parts.knobs.varlen_attention,
        compiled_step=parts.knobs.compile_step,
        compile_refused=parts.knobs.compile_refused,
        metrics_full_split=run.history[-1][1].get("eval_rows") == len(parts.tokens.valid),
        eval_precision=policy.name,  # evaluate() runs under the same autocast as training
        skipped_steps=int(parts.step.skipped_total.item()) if parts.scaler is not None else None,
    )
