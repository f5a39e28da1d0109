"""One training step: forward and backward over an accumulation window, then the optimizer step.

:class:`TrainStep` is the unit a caller compiles, captures or times (``hpo.check`` calls it
too). It never makes the host wait for the device: batch metadata arrives from collate as
host numbers and pinned tensors, the loss is summed into a device tensor, fp16's skipped
steps are counted on the device (by the precision policy), and nothing in forward, backward or the optimizer step reads
a device value (no ``.item()``, ``nonzero()``, boolean-mask indexing or data-dependent
shapes). The loop reads that state every few steps through :meth:`TrainStep.read`, the one
place that syncs, marked ``trial_executor::host_read`` for the profiler; each step is marked
``trial_executor::train_step``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import record_function

from trial_executor.batches import Batch, to_device, window_rows
from trial_executor.precision import PrecisionPolicy
from trial_executor.train._optimizer import LearningRateSchedule

STEP_RANGE = "trial_executor::train_step"
READ_RANGE = "trial_executor::host_read"


@dataclass(frozen=True)
class StepReading:
    """What :meth:`TrainStep.read` found: the loss summed since the last reset, fp16's worst skip streak."""

    loss_sum: float
    skipped_in_a_row: int


def clip_grad_norm(parameters: Sequence[torch.Tensor], max_norm: float, *, traced: bool = False) -> None:
    """``torch.nn.utils.clip_grad_norm_``'s rule: scale every gradient by ``max_norm / (norm + 1e-6)`` when that is < 1.

    With the fewest host operations: one ``_foreach_norm`` (torch's own adds a no-op ``.to()`` per
    parameter, ~200 dispatches a step for BERT-base). ``traced`` (a compiled step): the norms
    written out per parameter, which inductor fuses; it does not lower ``_foreach_norm`` on the CPU.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    norms = [torch.linalg.vector_norm(g) for g in grads] if traced else torch._foreach_norm(grads)
    norm = torch.linalg.vector_norm(torch.stack(norms))
    torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))


class TrainStep:
    """``train_step(window)``: one optimizer step over an accumulation window (micro-batches, each a list of chunks).

    The loss of a window is the mean over all its rows: a chunk's mean loss counts by its share of
    the window's rows (an epoch's last window may hold a shorter micro-batch). ``loss_sum`` adds
    up the loss of every row trained on (each chunk's mean times its rows; read and reset by the
    caller at evaluations, which divides by the rows: a per-row mean whatever the batching). The precision policy
    owns autocast, the backward (fp16: scaled) and the optimizer step (fp16: unscaled, maybe skipped).
    """

    def __init__(
        self, model: torch.nn.Module, forward: Callable[..., Any], optimizer: torch.optim.Optimizer,
        scheduler: LearningRateSchedule, policy: PrecisionPolicy,
        *, max_grad_norm: float | None, device: torch.device, loss_sum: float = 0.0,
    ) -> None:
        self.model, self.forward, self.optimizer, self.scheduler = model, forward, optimizer, scheduler
        self.policy, self.max_grad_norm, self.device = policy, max_grad_norm, device
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.loss_sum = torch.full((), loss_sum, device=device)

    def __call__(self, window: Sequence[Sequence[Batch]]) -> None:
        with record_function(STEP_RANGE):
            total = window_rows(window)
            for chunks in window:
                for chunk in chunks:
                    inputs = to_device(chunk.inputs, self.device)
                    with self.policy.autocast():
                        loss = self.forward(**inputs).loss
                    # By rows, not micro-batches: an epoch's last, shorter window is then the
                    # mean over its rows too, as one batch of them would be.
                    self.policy.backward(loss * (chunk.rows / total))
                    self.loss_sum += loss.detach() * chunk.rows
            self.policy.optimizer_step(self.optimizer, self._clip)
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)

    def _clip(self) -> None:
        if self.max_grad_norm is not None:
            clip_grad_norm(self.parameters, self.max_grad_norm)

    def read(self) -> StepReading:
        """The device state on the host: the one place a step's results are read (a GPU syncs here)."""
        with record_function(READ_RANGE):
            worst = self.policy.read_skip_streak()
            return StepReading(float(self.loss_sum.item()), worst)
