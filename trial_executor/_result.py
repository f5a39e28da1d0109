"""The executor's output."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trial_executor._config import MAJORITY_CLASS

# A trial whose threads waited for a core over this share of the time they were ready to run shared its
# cores with other processes: its speed is partly theirs (``TrialResult.cpu_contended``). Judged only over
# this many seconds of ready time: in a shorter run, threads waking up (a few ms each) weigh as much as a
# rival process (a 0.05 s trial alone waited 5%).
CPU_CONTENDED_ABOVE = 0.2
CPU_WAIT_JUDGED_FROM_S = 1.0


@dataclass(frozen=True)
class StepProgress:
    """Where a run stands, for a progress display: sent after optimizer steps, at most twice a second."""

    step: int
    total_steps: int
    train_loss: float  # mean over the micro-batches since the last evaluation
    samples_per_s: float  # training samples per second of training time so far


ProgressFn = Callable[[StepProgress], None]


@dataclass(frozen=True)
class TrialResult:
    """What one training run measured.

    ``metrics`` holds the last evaluation (``accuracy``, ``macro_f1``, ``loss``); ``history``
    every evaluation as ``(step, metrics)``. ``stopped_early`` is true when the ``report``
    callback asked to stop. Throughput counts training only: samples and real (non-padding)
    tokens per second of the training loop, evaluation excluded. ``padding_efficiency`` is
    real tokens / processed tokens over all training batches as padded. ``packed_forward``
    tells whether the packed forward ran (projections and feed-forward on real tokens only).
    ``resumed_at_step`` is the optimizer step a resumed run started from (``None``: from 0).
    ``stopped_reason``: ``"pruned"`` (the callback stopped it; ``stopped_early`` is then true),
    ``"early_stopping"`` (the metric stopped improving; ``metrics`` is the last evaluation), or
    ``None`` (ran to the end). ``max_length`` is the length texts were cut at (resolved when the
    config said ``auto``), ``truncated_fraction`` the share of training rows cut. ``trainable_params``
    and ``trainable_fraction`` (of all parameters) tell what a LoRA run trained.

    Throughput is steady state when ``steady_state``: after warm-up (the first steps and at
    least half a second) and without the start-up steps of each new batch shape, whose time is
    ``compile_seconds`` (compilation, CUDA-graph capture, kernel selection); otherwise, in runs
    too short to warm up, it is over the whole training loop less those start-up steps (all of it
    when only start-up steps ran). ``throughput_all_samples_per_s`` is always over the whole loop.
    ``device_busy_fraction`` (CUDA only; ``None`` on the CPU) is the share of measured steps in
    which the device, not the host, set the pace (see :mod:`trial_executor.device._throughput`);
    ``host_limited`` is true below one half: the executor's overhead, not the precision, set the
    speed. ``cpu_wait_fraction`` (Linux; ``None`` elsewhere) is the share of its ready time the
    process's threads waited for a CPU while training; ``cpu_contended`` is true above
    ``CPU_CONTENDED_ABOVE`` (other processes held the cores: the speed is partly theirs), ``None``
    under ``CPU_WAIT_JUDGED_FROM_S`` of ready time (too short to tell). ``buckets`` and
    ``varlen_attention`` tell which of those knobs ran (varlen attention drops no attention
    probabilities). ``checkpoint_dtype`` is the dtype the model's weights were
    stored in; training always used float32 master weights. ``compiled_step``: the whole step
    (forward with loss, backward, clipping, optimizer step) ran compiled per static-shape bucket, as
    CUDA graphs on CUDA; ``captured_step``: that step ran uncompiled, recorded by hand as a CUDA graph
    per bucket and replayed (``capture_step``); ``compile_refused`` says why a requested compiled or captured step ran
    otherwise (more than one backward per step, fp16's GradScaler), ``None`` when nothing was refused.
    ``master_weights``: bf16 computed on bf16 copies of the float32 weights (no autocast: layer
    norms, softmax and the loss in bf16 too); ``master_weights_refused`` says why, asked for, it
    did not run (autocast then did).

    Each evaluation's metrics carry ``eval_rows``, the validation rows it ran on: early evaluations
    (what a pruner sees) use the fixed sample of ``eval_sample_rows`` rows, the final one every row.
    ``metrics_full_split`` tells that ``metrics`` cover every validation row (false for a pruned
    run, whose last evaluation was a sampled one). ``eval_precision`` is the autocast precision
    evaluation ran in: the trial's own.
    """

    metrics: dict[str, float]
    history: list[tuple[int, dict[str, float]]]
    steps: int
    stopped_early: bool
    precision_effective: str
    throughput_samples_per_s: float
    throughput_tokens_per_s: float
    peak_memory_mb: float
    train_seconds: float
    eval_seconds: float
    used_grad_scaler: bool
    padding_efficiency: float
    tokenize_seconds: float
    tokenize_cache_hit: bool
    packed_forward: bool = False
    resumed_at_step: int | None = None
    stopped_reason: str | None = None
    max_length: int = 0
    truncated_fraction: float = 0.0
    trainable_params: int = 0
    trainable_fraction: float = 1.0
    throughput_all_samples_per_s: float = 0.0
    steady_state: bool = False
    compile_seconds: float = 0.0
    device_busy_fraction: float | None = None
    host_limited: bool | None = None
    cpu_wait_fraction: float | None = None
    cpu_contended: bool | None = None
    buckets: bool = False
    varlen_attention: bool = False
    checkpoint_dtype: str | None = None
    eval_sample_rows: int = 0
    metrics_full_split: bool = True
    eval_precision: str = ""
    # fp16: optimizer steps GradScaler skipped for inf/NaN gradients (since the last resume); None without a scaler.
    skipped_steps: int | None = None
    compiled_step: bool = False
    captured_step: bool = False
    compile_refused: str | None = None
    master_weights: bool = False
    master_weights_refused: str | None = None

    @property
    def majority_class(self) -> bool:
        """Trained to its end and still at the majority class: the last evaluation predicted one class for every row,
        or scored exactly the majority share (classification). A pruned run is not judged: it stopped early,
        often at its first evaluation, where a low learning rate has not left the majority class yet."""
        return not self.stopped_early and bool(self.metrics.get(MAJORITY_CLASS))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
