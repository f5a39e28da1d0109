"""The whole step recorded per bucket and replayed (issue 23, ``capture_step``), its logic checked on the CPU.

A CPU has no CUDA graphs: :class:`EagerReplay` stands in for the recorder, and its "replay" runs the
recorded body again on the very tensors the recording used. So what a CUDA graph relies on shows
here: one recording per bucket after one warm-up, the batch copied into the bucket's own input
tensors, gradients and optimizer state never reallocated, the learning rate filled in place, and
losses step for step the eager step's (a replay that read a stale batch or kept last step's
gradients would drift at once).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from test_compiled_step import BASE, _losses, _parts, _windows

from trial_executor import TextClassificationData, TrainConfig, demo_dataset, run_trial
from trial_executor.device import oom_in
from trial_executor.train._build import TrialParts
from trial_executor.train._captured import WARMUP_OCCURRENCES, CapturedStep, EagerReplay
from trial_executor.train._optimizer import LearningRateSchedule

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def data() -> TextClassificationData:
    return demo_dataset(n_train=100, n_valid=16, seed=3)


def _replayed(parts: TrialParts) -> EagerReplay:
    """Put a :class:`CapturedStep` on :class:`EagerReplay` in place of the parts' compiled step (the same static-shape parts).

    Its AdamW keeps the rate a tensor filled in place, single-tensor: the capturable foreach AdamW a
    CUDA recording uses runs eagerly on CUDA only (on the CPU, only the compiler traces it).
    """
    step, built = parts.train_step, parts.step_parts
    groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in built.optimizer.param_groups]
    built.optimizer = torch.optim.AdamW(groups, lr=torch.tensor(BASE["learning_rate"]), foreach=False)
    schedule = built.scheduler
    built.scheduler = LearningRateSchedule(built.optimizer, schedule.peak, schedule.factor, parts.total_steps)
    recorder = EagerReplay()
    built.train_step = CapturedStep(
        parts.model, step.forward, built.optimizer, built.scheduler, step.policy, max_grad_norm=step.max_grad_norm, device=CPU,
        recorder=recorder,
    )
    return recorder


def _addresses(parts: TrialParts) -> dict[str, list[int]]:
    optimizer = parts.step_parts.optimizer
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return {
        "grads": [p.grad.data_ptr() for p in parts.train_step.parameters],
        "state": [t.data_ptr() for t in state],
        "rates": [group["lr"].data_ptr() for group in optimizer.param_groups],
        "loss_sum": [parts.train_step.loss_sum.data_ptr()],
    }


def test_each_bucket_is_recorded_once_then_replayed_on_fixed_tensors_with_the_eager_steps_losses(data: TextClassificationData) -> None:
    parts = _parts(data, compile_step=True)  # static shapes and the tensor learning rate, as capture_step builds them
    recorder = _replayed(parts)
    step = parts.train_step
    assert isinstance(step, CapturedStep)
    windows = _windows(parts, 80)
    buckets = [w[0][0].shape for w in windows]
    assert len(set(buckets)) >= 2

    losses, inputs_at, addresses = [], {}, None
    for i, window in enumerate(windows):
        step(window)
        losses.append(step.read().loss_sum)
        step.loss_sum.zero_()
        seen = buckets[: i + 1].count(buckets[i])
        assert (buckets[i] in step.recorded) is (seen > WARMUP_OCCURRENCES), f"step {i}"
        if buckets[i] in step.recorded:  # the bucket's input tensors: the same ones at every replay
            ptrs = {name: t.data_ptr() for name, t in step.recorded[buckets[i]][0].items()}
            assert inputs_at.setdefault(buckets[i], ptrs) == ptrs
        now = _addresses(parts)
        addresses = addresses or now
        assert now == addresses, f"step {i} moved a tensor a recording reads"
    assert recorder.recorded == len(set(buckets))
    lr = parts.step_parts.optimizer.param_groups[0]["lr"]
    assert lr.item() == pytest.approx(parts.step_parts.scheduler.get_last_lr()[0]) != BASE["learning_rate"]

    eager = _parts(data, compile_step=False)  # the eager step, dynamic padding, the same rows in the same order
    eager_losses, _ = _losses(eager, _windows(eager, 80))
    torch.testing.assert_close(losses[:50], eager_losses[:50], rtol=2e-3, atol=2e-4)
    assert losses[-1] < losses[0] - 0.05  # and it trains


def test_capture_step_asked_for_on_the_cpu_runs_the_eager_step_and_says_why() -> None:
    config = TrainConfig(**{**BASE, "epochs": 2, "eval_every": 0, "capture_step": True})
    result = run_trial(config, demo_dataset(n_train=32, n_valid=16, seed=3))
    assert result.steps == 8 and not result.captured_step and not result.compiled_step
    assert result.compile_refused == "capture_step: CUDA graphs are CUDA only, not cpu; the step runs eager"


@contextlib.contextmanager
def _capture_whose_end_fails() -> Iterator[None]:
    """What ``torch.cuda.graph`` does on exit when its body broke the capture: it ends the capture anyway, and that raises."""
    try:
        yield
    finally:
        raise RuntimeError("CUDA error: operation failed due to a previous error during capture")


def _oom() -> None:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_an_oom_inside_a_recording_reaches_the_trial_as_an_oom_not_as_the_capture_error_over_it() -> None:
    with pytest.raises(RuntimeError) as hidden, _capture_whose_end_fails():
        _oom()
    assert isinstance(hidden.value.__context__, torch.OutOfMemoryError)  # what the trial sees: the capture's error
    assert oom_in(hidden.value) is hidden.value.__context__  # and what it takes it for: the OOM under it
    with pytest.raises(RuntimeError) as twice, _capture_whose_end_fails(), _capture_whose_end_fails():
        _oom()  # two errors over it (the capture's end, then the stream's restore, say)
    assert isinstance(oom_in(twice.value), torch.OutOfMemoryError)


def test_an_error_that_was_not_raised_over_an_oom_passes_unchanged() -> None:
    with pytest.raises(RuntimeError, match="previous error during capture") as raised, _capture_whose_end_fails():
        raise ValueError("a shape the graph did not expect")
    assert oom_in(raised.value) is None
    with pytest.raises(torch.OutOfMemoryError) as plain:
        _oom()
    assert oom_in(plain.value) is plain.value
