"""Counting the aten operations the host dispatches inside one training step (issue 23: host work counted, not guessed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.profiler import ProfilerActivity, profile

from trial_executor.train._step import STEP_RANGE


def host_ops(step: Callable[[Sequence[Any]], None], window: Sequence[Any], warmup: int = 3) -> int:
    """Aten operations dispatched inside the profiler's train-step range of one ``step(window)``, after ``warmup`` steps."""
    for _ in range(warmup):  # compiled, and every lazily built buffer in place
        step(window)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(window)
    events = prof.events()
    (span,) = [e.time_range for e in events if e.name == STEP_RANGE]
    return sum(1 for e in events if e.name.startswith("aten::") and span.start <= e.time_range.start <= span.end)
