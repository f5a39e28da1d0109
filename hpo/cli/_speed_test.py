"""A short autocast speed test per precision: random tokens through a random-init BERT.

Numbers from here say what a precision buys on this machine before a study spends hours on
it: time per training step, speedup against fp32, peak memory. The step is the executor's own
(:class:`~trial_executor.train._step.TrainStep`, with the forward, optimizer and per-device knobs a
trial would use), so the figures are what a study will see. On a GPU it warms up until two
steps in a row agree within 10%, and also measures the host's time to issue one step (its share
of the step time near 1: the host, not the device, sets the pace) and how many timed steps the
device set the pace of (:class:`~trial_executor.device._throughput.DeviceLag`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import AutoModelForSequenceClassification, PretrainedConfig

from hpo.cli._check_models import model_config
from trial_executor import PRECISIONS, PrecisionPolicy, TrainConfig, UnsupportedPrecisionError, heap_frozen
from trial_executor.batches import (
    TOKEN_MULTIPLE,
    Batch,
    Collation,
    StaticCollation,
    TokenizedSplit,
    packed_width,
    round_up,
    window_rows,
)
from trial_executor.device import CpuWait, DeviceLag, Knobs, oom_in, peak_memory_mb, release_memory, reset_peak_memory
from trial_executor.precision import emulated_precisions, global_state_kept
from trial_executor.train import TrainStep, build_step, release_compiled


@dataclass(frozen=True)
class SpeedRow:
    """One precision's result; ``note`` says why there are no numbers (unsupported, out of memory)."""

    precision: str
    ms_per_step: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None
    peak_memory_mb: float | None = None
    final_loss: float | None = None
    note: str = ""
    host_ms_per_step: float | None = None  # CUDA: issuing one step with the device idle
    device_busy: float | None = None  # CUDA: share of timed steps where the device set the pace

    @property
    def host_share(self) -> float | None:
        """The host's time to issue a step over the step's time: near 1, the host sets the pace."""
        if self.host_ms_per_step is None or not self.ms_per_step:
            return None
        return self.host_ms_per_step / self.ms_per_step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class _Timing:
    seconds: float  # for the timed steps, synced
    loss: float
    host_seconds: float | None  # issuing one step, the device idle (CUDA only)
    device_busy: float | None  # share of timed steps where the device set the pace (CUDA only)
    refused: str = ""  # knobs asked for that this precision ran without, and why
    contended: str = ""  # said when other processes held the cores while it was timed


def _refusals(knobs: Knobs) -> str:
    return "; ".join(r for r in (knobs.compile_refused, knobs.master_weights_refused) if r)


def _executor_step(
    policy: PrecisionPolicy, config: PretrainedConfig, device: torch.device, batch_size: int, seq_len: int, seed: int,
    knobs: dict[str, bool] | None = None,
) -> tuple[TrainStep, list[list[Batch]], Knobs]:
    """The executor's own step (forward choice, optimizer, precision policy, ``knobs``) on one random batch, and its knobs."""
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa").to(device).train()
    model.config.problem_type = "single_label_classification"  # as load_model sets it
    train_config = TrainConfig(
        fp_precision=policy.name, batch_size=batch_size, learning_rate=1e-4, warmup_ratio=0.0, lr_schedule="constant", max_grad_norm=1.0,
        **(knobs or {}),
    )
    parts = build_step(model, train_config, device, policy, total_steps=1)
    step, resolved = parts.train_step, parts.knobs
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (batch_size, seq_len), generator=generator).tolist()
    labels = torch.randint(0, 2, (batch_size,), generator=generator).tolist()
    pin = device.type == "cuda"
    collation = Collation(0, packed=resolved.packed_forward, pin=pin)
    if resolved.compile_step:
        collation = StaticCollation(
            0, buckets=(packed_width(seq_len),), packed=resolved.packed_forward, pin=pin, rows=batch_size,
            token_buckets=(round_up(batch_size * seq_len, TOKEN_MULTIPLE),),
        )
    return step, [[collation(TokenizedSplit(ids, labels), range(batch_size))]], resolved


def _warm_up(step: TrainStep, window: list[list[Batch]], device: torch.device, warmup: int) -> None:
    """``warmup`` steps, then on a GPU more until two steps in a row take within 10% of each other."""
    last = math.inf
    for i in range(warmup + (40 if device.type == "cuda" else 0)):
        tick = time.perf_counter()
        step(window)
        _sync(device)
        took = time.perf_counter() - tick
        if i + 1 >= warmup and (device.type != "cuda" or abs(took - last) <= 0.1 * last):
            return
        last = took


def _time_steps(
    policy: PrecisionPolicy, config: PretrainedConfig, device: torch.device, batch_size: int, seq_len: int,
    warmup: int, steps: int, seed: int, knobs: dict[str, bool] | None = None,
) -> _Timing:
    """``steps`` timed executor steps after warm-up; on a GPU also the host's cost and who set the pace."""
    step, window, resolved = _executor_step(policy, config, device, batch_size, seq_len, seed, knobs)
    _warm_up(step, window, device, warmup)
    host = None
    if device.type == "cuda":
        issued = []
        for _ in range(3):
            _sync(device)
            tick = time.perf_counter()
            step(window)
            issued.append(time.perf_counter() - tick)
        host = statistics.median(issued)
    _sync(device)
    lag, cpu_wait = DeviceLag(device), CpuWait()
    lag.anchor()
    cpu_wait.start()
    start = time.perf_counter()
    for _ in range(steps):
        began = time.perf_counter()
        step(window)
        lag.step_done(began)
    _sync(device)
    seconds = time.perf_counter() - start
    lag.collect()
    cpu_wait.stop()
    contended = f"CPU-contended (waited {cpu_wait.fraction():.0%} for a core: other processes held them)" if cpu_wait.contended() else ""
    step.loss_sum.zero_()
    step(window)  # untimed: the loss after the timed steps
    loss = step.read().loss_sum / window_rows(window)  # the step sums its rows' losses
    return _Timing(seconds, loss, host, lag.busy_fraction(), _refusals(resolved), contended)


def speed_test(
    model: str, device: torch.device, *, batch_size: int, seq_len: int, steps: int, warmup: int = 2, seed: int = 0,
    knobs: dict[str, bool] | None = None, precisions: Sequence[str] = PRECISIONS,
) -> list[SpeedRow]:
    """Time each of ``precisions`` (default: all) on ``device``, in registry order; fp32, when among them, runs
    first and is the reference for speedups (without it there are none).

    ``knobs`` (``compile_step``, ``torch_compile``, ``varlen_attention``, ``master_weights``: on or off) override the
    device's defaults, as a space's fixed values would; a refused knob (fp16 and ``compile_step``)
    runs as a trial would, without it.
    """
    config = model_config(model)
    rows: list[SpeedRow] = []
    reference: float | None = None
    emulated = set(emulated_precisions(device))  # said on their rows: their speed is the emulation's
    # The caller's TF32 and cuDNN flags come back (each precision sets them); release_memory's collections walk
    # what the precisions made, not the libraries.
    with global_state_kept(), heap_frozen():
        for precision in [p for p in PRECISIONS if p in precisions]:
            try:
                policy = PrecisionPolicy.resolve(precision, device)
            except UnsupportedPrecisionError as err:
                rows.append(SpeedRow(precision, note=f"unsupported: {str(err).split(': ', 1)[-1]}"))
                continue
            policy.apply_global_state(cudnn_benchmark=False)
            release_memory(device)
            reset_peak_memory(device)
            try:
                timing = _time_steps(policy, config, device, batch_size, seq_len, warmup, steps, seed, knobs)
            except Exception as err:
                if oom_in(err) is None:  # the CPU allocator's is a plain RuntimeError: --batch-size 10**12 was a traceback
                    raise
                release_memory(device)
                rows.append(SpeedRow(precision, note=f"out of memory at batch size {batch_size}"))
                continue
            peak = peak_memory_mb(device)
            release_compiled()
            release_memory(device)
            per_step, loss = timing.seconds / steps, timing.loss
            if precision == "fp32":
                reference = per_step
            rows.append(SpeedRow(
                precision, ms_per_step=per_step * 1000, samples_per_s=batch_size / per_step,
                speedup=reference / per_step if reference else None, peak_memory_mb=peak, final_loss=loss,
                note="; ".join(n for n in (
                    f"emulated: this CPU has no {precision} matmul instructions" if precision in emulated else "", timing.refused,
                    "" if math.isfinite(loss) else "loss is not finite", timing.contended) if n),
                host_ms_per_step=None if timing.host_seconds is None else timing.host_seconds * 1000,
                device_busy=timing.device_busy,
            ))
    return rows


def parameter_count(model: str) -> int:
    with torch.device("meta"):
        built = AutoModelForSequenceClassification.from_config(model_config(model))
    return sum(p.numel() for p in built.parameters())
