"""The optimizer and learning-rate schedule every trial trains with."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from trial_executor._config import TrainConfig


def lr_lambda(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """Linear warmup to the peak rate, then linear or cosine decay to zero (or constant)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return max(0.0, 1.0 - progress)

    return factor


def make_optimizer(
    model: torch.nn.Module, config: TrainConfig, device: torch.device, *, capturable: bool = False, compiled: bool = False,
) -> torch.optim.AdamW:
    """AdamW, fused where this torch supports it on ``device``; no decay on biases and norms.

    ``capturable`` (CUDA): state and step counts stay on the device, so the step can be captured
    in a CUDA graph and never reads its step count on the host. ``compiled``: for a step that
    ``torch.compile`` traces (:mod:`trial_executor.train._compiled`): the learning rate is a tensor on
    ``device`` that the scheduler fills in place (a Python float would be baked into the graph:
    a recompile per new rate, or a frozen schedule under CUDA graphs), and the compiler fuses the
    update (not the fused kernel, which it cannot trace).
    """
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if compiled:
        lr = torch.tensor(float(config.learning_rate), device=device)
        # A tensor rate needs capturable (state and step counts as tensors) with foreach: the
        # compiler traces one group of foreach ops, far quicker to compile than a loop per parameter.
        return torch.optim.AdamW(groups, lr=lr, foreach=True, capturable=True)
    try:
        fused = device.type in ("cuda", "cpu")
        return torch.optim.AdamW(groups, lr=config.learning_rate, fused=fused, capturable=capturable and device.type == "cuda")
    except RuntimeError:
        return torch.optim.AdamW(groups, lr=config.learning_rate)


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(saved)``, keeping each tensor-valued group setting's own tensor.

    A compiled step's learning rate is a tensor on the device, read by its compiled graphs and
    filled in place by the scheduler. ``load_state_dict`` would put the checkpoint's tensor (on
    the CPU, where checkpoints are loaded) in its place: the step would then read a CPU rate, which
    CUDA graphs cannot capture. The saved values are copied into the tensors the step was built with.
    """
    built = [{key: value for key, value in group.items() if isinstance(value, torch.Tensor)} for group in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, tensors in zip(optimizer.param_groups, built, strict=True):
        for key, tensor in tensors.items():
            with torch.no_grad():
                tensor.copy_(group[key])
            group[key] = tensor

