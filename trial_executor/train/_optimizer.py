"""The optimizer and learning-rate schedule every trial trains with."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from trial_executor._config import TrainConfig, nearest_step


def warmup_steps(warmup_ratio: float, total_steps: int) -> int:
    """``warmup_ratio`` of ``total_steps``, to the nearest step, a half up: round() took 0.1 of 5 steps to no warmup."""
    return nearest_step(warmup_ratio * total_steps)


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


class LearningRateSchedule:
    """Sets each optimizer step's learning rate: ``peak`` times :func:`lr_lambda`'s factor.

    The schedule counts the optimizer steps *applied*: a step that fp16's GradScaler skipped (its
    gradients were inf/NaN) does not advance it, as in HF Trainer, so fp16 keeps its whole warmup.
    Whether a step was skipped is known only on the device; with ``skipped`` (the policy's device
    count of skipped steps) the rate is looked up on the device from a table of the factors, so no
    step waits for the device to answer. That needs the rate to be a tensor there (see
    :func:`make_optimizer`'s ``rate_on_device``). Without ``skipped`` every step counts; a rate
    held as a tensor (a compiled step's) is filled in place.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, peak: float, factor: Callable[[int], float], total_steps: int,
        skipped: torch.Tensor | None = None,
    ) -> None:
        self.optimizer, self.peak, self.factor, self.skipped = optimizer, peak, factor, skipped
        self.steps = 0  # optimizer steps taken, skipped ones included
        self.table = None
        if skipped is not None:
            self.table = torch.tensor([peak * factor(s) for s in range(total_steps + 1)], device=skipped.device)
        self._set_rate()

    def step(self) -> None:
        """After each optimizer step (a skipped one too: the count of skips says which)."""
        self.steps += 1
        self._set_rate()

    def _set_rate(self) -> None:
        if self.table is None:
            rate = self.peak * self.factor(self.steps)
            for group in self.optimizer.param_groups:
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"].fill_(rate)
                else:
                    group["lr"] = rate
            return
        applied = (self.steps - self.skipped).clamp(max=self.table.numel() - 1).view(1)
        rate = self.table.gather(0, applied).view(())  # gather, not table[applied]: indexing would read the index on the host
        for group in self.optimizer.param_groups:
            group["lr"].copy_(rate)

    def get_last_lr(self) -> list[float]:
        """The current rate of each group, as LambdaLR reports it (reads the device: syncs)."""
        return [float(group["lr"]) for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        # LambdaLR's key for the same count: checkpoints written before this class resume.
        return {"last_epoch": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the saved step (after the precision policy's state: its count of skips)."""
        self.steps = int(state["last_epoch"])
        self._set_rate()


def make_optimizer(
    model: torch.nn.Module, config: TrainConfig, device: torch.device, *, capturable: bool = False, compiled: bool = False,
    rate_on_device: bool = False,
) -> torch.optim.AdamW:
    """AdamW, fused where this torch supports it on ``device``; no decay on biases and norms.

    ``capturable`` (CUDA): state and step counts stay on the device, so the step can be captured
    in a CUDA graph and never reads its step count on the host. ``compiled``: for a step that
    ``torch.compile`` traces (:mod:`trial_executor.train._compiled`): the learning rate is a tensor on
    ``device`` that the scheduler fills in place (a Python float would be baked into the graph:
    a recompile per new rate, or a frozen schedule under CUDA graphs), and the compiler fuses the
    update (not the fused kernel, which it cannot trace). ``rate_on_device``: the learning rate is a
    tensor on ``device`` that :class:`LearningRateSchedule` sets there (fp16: skipped steps do not count).
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
    lr = torch.tensor(float(config.learning_rate), device=device) if rate_on_device else config.learning_rate
    try:
        fused = device.type in ("cuda", "cpu")
        return torch.optim.AdamW(groups, lr=lr, fused=fused, capturable=capturable and device.type == "cuda")
    except RuntimeError:  # no fused kernel here; a tensor rate then needs the single-tensor update
        return torch.optim.AdamW(groups, lr=lr, foreach=False if rate_on_device else None)


# How a group's update runs: load_state_dict takes these from the checkpoint, not from the optimizer it loads into.
_HOW_IT_STEPS = ("capturable", "foreach", "fused", "differentiable")


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(saved)``, keeping each tensor-valued group setting's own tensor and how it steps.

    A compiled or captured step's learning rate is a tensor on the device, read by its graphs and
    filled in place by the scheduler. ``load_state_dict`` would put the checkpoint's tensor (on
    the CPU, where checkpoints are loaded) in its place: the step would then read a CPU rate, which
    CUDA graphs cannot capture. The saved values are copied into the tensors the step was built with.
    It would also take ``capturable``, ``foreach`` and ``fused`` from the checkpoint, whose run may
    have stepped another way (eager on a CPU worker, resumed on a GPU that records the step, which
    a non-capturable AdamW refuses): the optimizer keeps its own, and each step count goes where
    they want it (on the parameter's device when capturable or fused, else on the CPU).
    """
    built = [{key: value for key, value in group.items() if isinstance(value, torch.Tensor)} for group in optimizer.param_groups]
    how = [{key: group[key] for key in _HOW_IT_STEPS if key in group} for group in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, tensors, steps_how in zip(optimizer.param_groups, built, how, strict=True):
        for key, tensor in tensors.items():
            with torch.no_grad():
                tensor.copy_(torch.as_tensor(group[key]))  # a checkpoint of an eager step holds a float
            group[key] = tensor
        if isinstance(group.get("lr"), torch.Tensor) and "lr" not in tensors:  # built with a float rate: it stays one
            group["lr"] = group["lr"].item()
        group.update(steps_how)
        on_device = bool(steps_how.get("capturable") or steps_how.get("fused"))
        for param in group["params"]:
            step = optimizer.state.get(param, {}).get("step")
            if isinstance(step, torch.Tensor):
                optimizer.state[param]["step"] = step.to(dtype=torch.float32, device=param.device if on_device else "cpu")

