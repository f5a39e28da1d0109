"""CUDA-graph capture as the benchmarks record it (PyTorch's "whole network capture" recipe)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def warm_up_on_side_stream(step: Callable[[], None], times: int) -> None:
    """``step`` run ``times`` times on a side stream, as a capture needs first (lazy state, allocations); synced back."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            step()
    torch.cuda.current_stream().wait_stream(side)
