"""The training step's own parts: gradient clipping by torch's rule with fewer host operations."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from trial_executor.train._step import clip_grad_norm


def _gradients(scale: float, layers: int = 1) -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape)) for _ in range(layers) for shape in ((16, 8), (8,), (8, 4), (4,))]
    for p in params:
        p.grad = torch.randn_like(p) * scale
    return params


@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("scale", [10.0, 0.01])  # clipped, and left alone (the coefficient clamps at 1)
def test_clipping_scales_the_gradients_as_torch_does(traced: bool, scale: float) -> None:
    ours, theirs = _gradients(scale), _gradients(scale)
    clip_grad_norm(ours, 1.0, traced=traced)
    torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine.grad, reference.grad, rtol=1e-6, atol=0)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ours]))
    assert norm.item() == pytest.approx(1.0, rel=1e-5) if scale > 1 else norm.item() < 1.0


def test_clipping_dispatches_fewer_host_operations_than_torchs() -> None:
    def top_level_ops(clip: Callable[[list[torch.nn.Parameter]], None]) -> int:
        params = _gradients(10.0, layers=25)  # a hundred parameters, as a BERT's layers have
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            clip(params)
        events = [e for e in prof.events() if e.name.startswith("aten::")]
        return sum(1 for e in events if not (e.cpu_parent and e.cpu_parent.name.startswith("aten::")))

    ours = top_level_ops(lambda params: clip_grad_norm(params, 1.0))
    theirs = top_level_ops(lambda params: torch.nn.utils.clip_grad_norm_(params, 1.0))
    assert ours < 10 < 100 < theirs, (ours, theirs)  # torch's adds a no-op .to() per parameter
