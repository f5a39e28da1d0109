"""The training loop: one config and one dataset in, one :class:`TrialResult` out.

Reads top to bottom: resolve precision, build the model (LoRA adapters, gradient
checkpointing), tokenize, then per accumulation window one :class:`~trial_executor.train._step.TrainStep`
(forward, backward, clipping, optimizer step; it never waits for the device), a read of the
loss on the host every few steps (the only sync: failure checks and progress), evaluation every
``eval_every`` optimizer steps and at the end, reported to the caller, who may stop the run
(pruning); the run stops by itself once the evaluation metric stops improving (early stopping).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from trial_executor._config import TrainConfig
from trial_executor._failures import NonFiniteLossError, TrialInterrupted, TrialOutOfMemoryError
from trial_executor._heap import heap_frozen
from trial_executor._result import ProgressFn, StepProgress, TrialResult
from trial_executor.batches import Batch
from trial_executor.data import TextClassificationData
from trial_executor.device import (
    LoopTiming,
    MemoryWindow,
    bound_native_caches,
    oom_in,
    release_memory,
    resolve_device,
)
from trial_executor.model import (
    ModelSource,
    check_max_length,
    checkpoint_dtype,
    preload_model,
    resolve_model,
    save_final_model,
)
from trial_executor.precision import PrecisionPolicy, global_state_kept
from trial_executor.train._build import TrialParts, build_trial
from trial_executor.train._checkpoint import (
    Checkpointing,
    UnusableCheckpointError,
    restore_trial,
    save_checkpoint,
    trial_state,
)
from trial_executor.train._compiled import release_compiled
from trial_executor.train._early_stopping import EarlyStopping
from trial_executor.train._evaluation import eval_rows, evaluate
from trial_executor.train._progress import RunProgress
from trial_executor.train._trial_result import trial_result

ReportFn = Callable[[int, dict[str, float]], bool]
"""``report(step, metrics)`` is called after each evaluation and returns True to stop the run."""


STOPPED_PRUNED, STOPPED_EARLY_STOPPING = "pruned", "early_stopping"
# Progress updates come with the host reads of the loss, at most this often, and at the last step.
_PROGRESS_EVERY_S = 0.5


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_run_arguments(config: object, data: object, **hooks: object) -> None:
    """:func:`run_trial`'s arguments are of their types (``hooks``: callables, and a :class:`Checkpointing`, or ``None``):
    a ``TypeError`` naming the argument and the fix, before any work (not an ``AttributeError`` from inside, nor a hook
    found uncallable at the first evaluation, after the model was built and trained)."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got a {type(config).__name__}; pass TrainConfig(**values)")
    if not isinstance(data, TextClassificationData):
        raise TypeError(f"data must be a TextClassificationData, got a {type(data).__name__}; pass demo_dataset(), "
                        "load_text_classification(path) or TextClassificationData(...)")
    for name, hook in hooks.items():
        wanted = isinstance(hook, Checkpointing) if name == "checkpointing" else callable(hook)
        if hook is not None and not wanted:
            what = "a Checkpointing" if name == "checkpointing" else "a function"
            raise TypeError(f"{name} must be {what} or None, got {hook!r}; pass {what}, or leave it out")


def run_trial(
    config: TrainConfig, data: TextClassificationData, report: ReportFn | None = None, *, checkpointing: Checkpointing | None = None,
    stop_requested: Callable[[], bool] | None = None, progress: ProgressFn | None = None,
) -> TrialResult:
    """Train ``config.model`` on ``data`` and evaluate it on the validation split.

    With ``checkpointing``, the run saves its state at each evaluation and resumes from
    ``checkpointing.resume_from`` when given. ``stop_requested`` is polled after each optimizer
    step; when it returns True the run saves a checkpoint and raises :class:`TrialInterrupted`.
    ``progress`` receives a :class:`StepProgress` now and then, and after the last step.

    Raises :class:`~trial_executor.UnsupportedPrecisionError` before any work when the
    device cannot run ``config.fp_precision``; :class:`~trial_executor.NonFiniteLossError` when
    the loss diverges; :class:`~trial_executor.TrialOutOfMemoryError` when memory runs out. Both
    are raised after the trial's memory is released, so the next trial starts clean. An exception
    ``report`` raises (``optuna.TrialPruned``, say) ends the trial and propagates unchanged, memory
    released too. An argument of the wrong type raises ``TypeError`` before any work.
    """
    check_run_arguments(config, data, report=report, checkpointing=checkpointing, stop_requested=stop_requested, progress=progress)
    device = resolve_device(config.device)
    source = resolve_model(config.model)  # the name checked once, for the whole trial
    check_max_length(source, config.max_length)  # before any work, not as a crash mid-trial
    bound_native_caches()
    policy = PrecisionPolicy.resolve(config.fp_precision, device)
    failure: Exception | None = None
    # The releases below walk what the trial made, not every object the libraries and the caller hold.
    with heap_frozen():
        try:
            with global_state_kept():  # the caller's TF32 and cuDNN flags come back after the trial
                policy.apply_global_state(cudnn_benchmark=config.cudnn_benchmark)
                return _train(config, source, data, report, device, policy, checkpointing, stop_requested, progress)
        except NonFiniteLossError as err:
            failure = NonFiniteLossError(err.step, err.detail)
        except TrialInterrupted as err:
            failure = TrialInterrupted(err.step, err.checkpoint)
        except Exception as err:
            oom = oom_in(err)
            if oom is None:
                raise
            failure = TrialOutOfMemoryError(
                config.batch_size, config.grad_accum_steps,
                f"out of memory at batch_size {config.batch_size} on {device.type}: {type(oom).__name__}: {str(oom)[:200]}",
            )
            del oom  # its traceback holds _train's frames, and with them the model
        finally:
            # _train's model, optimizer and batches are unreachable once it returns; compiled graphs
            # and CUDA-graph pools would keep them (and their memory) alive.
            release_compiled()
            release_memory(device)
        # Raised outside the except blocks: a chained exception's traceback would keep _train's
        # frames, and with them the model and optimizer, alive.
        raise failure


def _train(
    config: TrainConfig, source: ModelSource, data: TextClassificationData, report: ReportFn | None, device: torch.device,
    policy: PrecisionPolicy, checkpointing: Checkpointing | None, stop_requested: Callable[[], bool] | None, progress: ProgressFn | None,
) -> TrialResult:
    preload_model(source, data.label_names, data.task)  # the worker's cached copy, outside the trial's memory
    seed_everything(config.seed)
    memory = MemoryWindow.open(device)  # the trial's own peak: model, optimizer, activations, tokens
    parts = build_trial(config, data, device, policy, source)
    loop = _Loop(config, data, device, parts, report, checkpointing, stop_requested, progress)
    resumed_at = None
    if checkpointing is not None and checkpointing.resume_from is not None:
        try:
            loop.run = restore_trial(parts, config, data, checkpointing.resume_from, loop.stopping)
            resumed_at = loop.run.step
        except UnusableCheckpointError as err:  # raised before anything is loaded: the parts are as built, step 0
            if checkpointing.on_unusable is None:
                raise
            checkpointing.on_unusable(err)
    loop.train()
    if checkpointing is not None and checkpointing.final_model is not None and loop.stopped != STOPPED_PRUNED:
        save_final_model(parts.model, parts.tokenizer, checkpointing.final_model, lora=config.finetune == "lora",
                         max_length=parts.tokens.max_length)
    return trial_result(
        parts, loop.run, loop.timing, loop.stopped, pruned=loop.stopped == STOPPED_PRUNED, resumed_at=resumed_at,
        peak_memory_mb=memory.peak_increase_mb(), checkpoint_dtype=checkpoint_dtype(source),
        eval_sample_rows=len(loop.sample_rows),
    )


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
    """One run's training loop; :meth:`train` reads top to bottom."""

    def __init__(
        self, config: TrainConfig, data: TextClassificationData, device: torch.device, parts: TrialParts,
        report: ReportFn | None, checkpointing: Checkpointing | None, stop_requested: Callable[[], bool] | None,
        progress: ProgressFn | None,
    ) -> None:
        self.config, self.data, self.device, self.parts, self.run = config, data, device, parts, RunProgress()
        self.report, self.checkpointing, self.stop_requested, self.progress = report, checkpointing, stop_requested, progress
        self.timing = LoopTiming(device, track_setup=device.type == "cuda" or parts.knobs.torch_compile or parts.knobs.compile_step)
        self.stopping = EarlyStopping.for_trial(config, data.task)
        self.stopped: str | None = None  # STOPPED_PRUNED or STOPPED_EARLY_STOPPING
        self.shown = 0.0
        self.sample_rows = eval_rows(len(parts.tokens.valid), config.eval_sample_size)

    def train(self) -> None:
        config, parts, run, timing = self.config, self.parts, self.run, self.timing
        timing.start()
        for window in self._windows():
            with timing.step(window):
                parts.train_step(window)
            run.count(window)
            last = run.step >= parts.total_steps
            evaluate_now = last or bool(config.eval_interval_steps and run.step % config.eval_interval_steps == 0)
            interrupted = not last and self.stop_requested is not None and self.stop_requested()
            if evaluate_now or interrupted or self._read_due(last):
                self._host_read(last)
            if evaluate_now or interrupted:
                with timing.paused() as seconds:
                    run.train_seconds += seconds
                    if evaluate_now:
                        self._evaluate(last, interrupted)
                    if interrupted and not self.stopped:  # pruned or stopped early here: the run ends as that
                        run.window_loss = parts.train_step.read().loss_sum
                        raise TrialInterrupted(run.step, self._checkpoint())
            if last or self.stopped:
                return

    def _windows(self) -> Iterator[list[list[Batch]]]:
        """The accumulation windows still to train on, epoch after epoch, from where the run is (resumed too)."""
        run, parts = self.run, self.parts
        generator = torch.Generator().manual_seed(self.config.seed)
        while run.step < parts.total_steps:
            if run.epoch_rng is None:
                run.epoch_rng = generator.get_state()
            generator.set_state(run.epoch_rng)
            epoch = parts.batches.epoch(generator, start=run.next_batch)
            for next_batch, window in _windows(epoch, run.next_batch, self.config.grad_accum_steps, parts.micro_per_epoch):
                run.next_batch = next_batch  # before the step: a checkpoint after it resumes past this window
                yield window
            run.epoch, run.next_batch, run.epoch_rng = run.epoch + 1, 0, None

    def _read_due(self, last: bool) -> bool:
        return last or self.run.step % self.parts.knobs.host_read_every == 0 or (self.progress is not None and self.run.step == 1)

    def _host_read(self, last: bool) -> None:
        """Read the step's device state (a GPU syncs here): fail on a non-finite loss, send progress."""
        run, config = self.run, self.config
        reading = self.parts.train_step.read()
        self.timing.synced()
        if reading.skipped_in_a_row > config.max_skipped_steps:
            raise NonFiniteLossError(
                run.step - 1,
                f"fp16 gradients were inf/NaN for {reading.skipped_in_a_row} optimizer steps in a row (GradScaler skipped them)",
            )
        if not self.parts.policy.uses_grad_scaler and not math.isfinite(reading.loss_sum):
            precision = config.fp_precision
            raise NonFiniteLossError(run.step - 1, f"{precision} training loss is {reading.loss_sum} by optimizer step {run.step}")
        now = time.perf_counter()
        if self.progress is not None and (last or run.step == 1 or now - self.shown >= _PROGRESS_EVERY_S):
            self.shown = now
            seconds = run.train_seconds + now - self.timing.clock.segment_started
            loss = (run.loss_sum + reading.loss_sum) / max(1, run.loss_count)
            self.progress(StepProgress(run.step, self.parts.total_steps, loss, run.samples / seconds if seconds > 0 else 0.0))

    def _evaluate(self, last: bool, interrupted: bool) -> None:
        run, parts = self.run, self.parts
        run.loss_sum += parts.train_step.read().loss_sum
        parts.train_step.loss_sum.zero_()
        tock = time.perf_counter()
        metrics = {**self._metrics(full=last), "train_loss": run.train_loss()}
        run.loss_sum, run.loss_count = 0.0, 0
        run.history.append((run.step, dict(metrics)))
        if self.report and self.report(run.step, dict(metrics)):
            self.stopped = STOPPED_PRUNED
        elif self.stopping.should_stop(metrics, last=last):
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
            parts.model, parts.step_parts.eval_forward, parts.tokens.valid, parts.policy, self.config, parts.eval_collation,
            self.data.num_labels, self.device, rows=None if full else self.sample_rows,
        )

    def _checkpoint(self) -> Path | None:
        if self.checkpointing is None:
            return None
        return save_checkpoint(trial_state(self.parts, self.config, self.data, self.run, self.stopping), self.checkpointing)
