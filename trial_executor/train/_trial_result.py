"""The :class:`TrialResult` of a finished run, built once from everything the run measured."""

from __future__ import annotations

from trial_executor._result import TrialResult
from trial_executor.device import HOST_LIMITED_BELOW, LoopTiming
from trial_executor.train._build import TrialParts
from trial_executor.train._progress import RunProgress


def trial_result(
    parts: TrialParts, run: RunProgress, timing: LoopTiming, stopped: str | None, *, pruned: bool,
    resumed_at: int | None, peak_memory_mb: float, checkpoint_dtype: str | None, eval_sample_rows: int,
) -> TrialResult:
    """Steady-state throughput where the run reached it, else over the whole loop less its start-up steps
    (see :class:`~trial_executor.device.TrainClock`)."""
    overall = run.samples / run.train_seconds if run.train_seconds else 0.0
    steady = timing.clock.steady_samples_per_s()
    after_setup = timing.clock.samples_per_s_after_setup(run.samples, run.train_seconds)
    samples_per_s = steady if steady is not None else after_setup if after_setup is not None else overall
    busy = timing.lag.busy_fraction()
    knobs, policy, final = parts.knobs, parts.policy, run.history[-1][1]
    return TrialResult(
        metrics=final, history=run.history, steps=run.step, stopped_early=pruned, stopped_reason=stopped,
        precision_effective=policy.name,
        throughput_samples_per_s=samples_per_s,
        throughput_tokens_per_s=samples_per_s * run.tokens / run.samples if run.samples else 0.0,
        peak_memory_mb=peak_memory_mb,
        train_seconds=run.train_seconds,
        eval_seconds=run.eval_seconds,
        used_grad_scaler=policy.uses_grad_scaler,
        padding_efficiency=run.tokens / run.padded_tokens if run.padded_tokens else 1.0,
        tokenize_seconds=parts.tokens.seconds,
        tokenize_cache_hit=parts.tokens.cache_hit,
        packed_forward=knobs.packed_forward,
        resumed_at_step=resumed_at,
        max_length=parts.tokens.max_length,
        truncated_fraction=parts.tokens.truncated_fraction,
        trainable_params=parts.trainable_params,
        trainable_fraction=parts.trainable_params / parts.total_params,
        throughput_all_samples_per_s=overall,
        steady_state=steady is not None,
        compile_seconds=timing.clock.setup_seconds,
        device_busy_fraction=busy,
        host_limited=None if busy is None else busy < HOST_LIMITED_BELOW,
        cpu_wait_fraction=timing.cpu_wait.fraction(),
        cpu_contended=timing.cpu_wait.contended(),
        buckets=knobs.buckets,
        varlen_attention=knobs.varlen_attention,
        compiled_step=knobs.compile_step and not knobs.capture_step,
        captured_step=knobs.capture_step,
        compile_refused=knobs.compile_refused,
        master_weights=knobs.master_weights,
        master_weights_refused=knobs.master_weights_refused,
        metrics_full_split=final.get("eval_rows") == len(parts.tokens.valid),
        eval_precision=policy.name,  # evaluate() runs under the same autocast as training
        skipped_steps=policy.skipped_steps(),
        checkpoint_dtype=checkpoint_dtype,
        eval_sample_rows=eval_sample_rows,
    )
