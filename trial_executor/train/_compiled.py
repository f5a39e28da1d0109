"""The whole training step compiled per static-shape bucket (issue 23): few host operations per step.

When the host, not the device, sets the pace (small batches on a GPU), a step costs what the
Python and the dispatcher cost to issue its hundreds of operations, and autocast adds casts to
issue. :class:`CompiledStep` compiles the step's two regions with ``torch.compile(dynamic=False)``:

- the forward with the loss (computed here, outside the HF model, weighted by ``row_weight`` so
  dummy rows count for nothing), whose backward AOTAutograd compiles with it;
- clipping and the optimizer step (AdamW with its learning rate a tensor that the scheduler
  updates in place, so a new rate is no new graph).

On CUDA the forward with the loss (and its backward) is compiled with ``mode="reduce-overhead"``:
CUDA graphs, one set per bucket, replayed each step. The update is compiled without CUDA graphs
(:func:`compile_modes` says why). On the CPU the default mode (CUDA graphs are CUDA only). Shapes come from
:class:`~trial_executor.batches._static.StaticCollation`, so a trial compiles once per bucket; the first
steps of each shape are timed apart as ``compile_seconds`` and left out of throughput
(:class:`~trial_executor.device._throughput.TrainClock`). :func:`release_compiled` drops the graphs,
dynamo's caches and CUDA-graph memory at the end of every trial.

Only steps with one backward are compiled: ``trial_executor.device._defaults.compile_step_refusal``
sends accumulation, chunking and fp16's GradScaler to the eager :class:`TrainStep`, with the reason
recorded on the trial.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from trial_executor.batches import Batch, to_device
from trial_executor.precision import PrecisionPolicy
from trial_executor.train._optimizer import LearningRateSchedule
from trial_executor.train._step import STEP_RANGE, TrainStep, clip_grad_norm


def compile_modes(device: torch.device) -> tuple[str | None, str | None]:
    """``torch.compile``'s mode for the forward with the loss, and for clipping with the optimizer step, on ``device``."""
    if device.type != "cuda":
        return None, None
    # The update under CUDA-graph trees killed the process on an H200 (torch 2.11, session 22: a
    # segfault in its first CUDA-graph-tree run; benchmarks/RESULTS.md). pytorch/pytorch#192748 (open)
    # reports such segfaults for tensors mutated in place across calls, as clipping and AdamW do.
    # Inductor still fuses the update into few kernels; what capturing it would add is to be measured.
    return "reduce-overhead", None


def weighted_loss(logits: torch.Tensor, labels: torch.Tensor, row_weight: torch.Tensor, problem_type: str | None) -> torch.Tensor:
    """The HF head's loss for ``problem_type``, averaged over the rows with weight 1 (dummy rows weigh 0)."""
    rows = labels.shape[0]
    if problem_type == "regression":
        per_row = (logits.view(rows, -1) - labels.view(rows, -1)).pow(2).mean(1)
    elif problem_type == "multi_label_classification":
        per_row = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").mean(1)
    else:
        per_row = F.cross_entropy(logits, labels, reduction="none")
    return (per_row * row_weight).sum() / row_weight.sum()


class WholeStep(TrainStep):
    """:class:`TrainStep` for windows of one micro-batch of one chunk, as two regions a compiler or a CUDA graph takes whole.

    The regions: :meth:`_loss`, the forward with its weighted loss (whose backward comes with it), and
    :meth:`_update`, clipping with the optimizer step. fp16's GradScaler has no place in them.
    """

    autocast_cache = True  # autocast's cache of cast weights (a CUDA-graph recording turns it off)
    traced_clip = False  # clipping's norms written out per parameter (for a compiler that cannot lower _foreach_norm)

    def __init__(
        self, model: torch.nn.Module, forward: Callable[..., Any], optimizer: torch.optim.Optimizer,
        scheduler: LearningRateSchedule, policy: PrecisionPolicy,
        *, max_grad_norm: float | None, device: torch.device, loss_sum: float = 0.0,
    ) -> None:
        if policy.uses_grad_scaler:
            raise ValueError("fp16's GradScaler is neither compiled nor captured: use TrainStep (see compile_step_refusal)")
        super().__init__(model, forward, optimizer, scheduler, policy, max_grad_norm=max_grad_norm, device=device, loss_sum=loss_sum)
        self.problem_type = getattr(getattr(model, "config", None), "problem_type", None)
        self._raw_step = inspect.unwrap(type(optimizer).step)

    def _loss(self, labels: torch.Tensor, row_weight: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        with self.policy.autocast(cache=self.autocast_cache):
            logits = self.forward(**inputs).logits
        return weighted_loss(logits.float(), labels, row_weight, self.problem_type)

    def _update(self) -> None:
        if self.max_grad_norm is not None:
            clip_grad_norm(self.parameters, self.max_grad_norm, traced=self.traced_clip)
        # The undecorated step: Optimizer.step's own wrappers break the graph on purpose around it
        # (no_grad for AOTAutograd; the caller runs this region under no_grad instead) and
        # count calls for the scheduler (see __init__).
        self._raw_step(self.optimizer)

    @staticmethod
    def one_batch(window: Sequence[Sequence[Batch]]) -> Batch:
        """The window's one batch; a window of more (more than one backward per optimizer step) is refused."""
        if len(window) != 1 or len(window[0]) != 1:
            raise ValueError("a whole step takes one micro-batch of one chunk (one backward per optimizer step)")
        return window[0][0]


class CompiledStep(WholeStep):
    """:class:`WholeStep` with its two regions compiled (see the module)."""

    traced_clip = True  # inductor does not lower _foreach_norm on the CPU

    def __init__(
        self, model: torch.nn.Module, forward: Callable[..., Any], optimizer: torch.optim.Optimizer,
        scheduler: LearningRateSchedule, policy: PrecisionPolicy,
        *, max_grad_norm: float | None, device: torch.device, loss_sum: float = 0.0, backend: str = "inductor",
    ) -> None:
        super().__init__(model, forward, optimizer, scheduler, policy, max_grad_norm=max_grad_norm, device=device, loss_sum=loss_sum)
        loss_mode, update_mode = compile_modes(device)
        # ``backend``: torch.compile's; "aot_eager" traces the same graphs without generating code
        # (how the tests check graph breaks, recompiles and eager equality in seconds).
        self.compiled_loss = torch.compile(self._loss, dynamic=False, mode=loss_mode, backend=backend)
        self.compiled_update = torch.compile(self._update, dynamic=False, mode=update_mode, backend=backend)

    def __call__(self, window: Sequence[Sequence[Batch]]) -> None:
        batch = self.one_batch(window)
        with record_function(STEP_RANGE):
            loss = self.compiled_loss(**to_device(batch.inputs, self.device))
            loss.backward()
            self.loss_sum += loss.detach() * batch.rows  # summed per row, as TrainStep's
            with torch.no_grad():
                self.compiled_update()
            self.scheduler.step()  # fills the learning-rate tensors in place
            self.optimizer.zero_grad(set_to_none=True)


def release_compiled() -> None:
    """Drop every compiled graph, dynamo's caches and the CUDA-graph pools (the next trial compiles its own)."""
    if "torch._dynamo" in sys.modules:  # else nothing was ever compiled in this process (and importing it costs)
        torch.compiler.reset()
