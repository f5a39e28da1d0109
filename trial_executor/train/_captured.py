"""The whole training step recorded by hand as one CUDA graph per static-shape bucket, then replayed (issue 23).

The compiled step (:mod:`trial_executor.train._compiled`) left the host setting the pace at batch 32 on
an H200 (the update still launched kernel by kernel) and spent 5-65 s compiling per trial (98% of
a 10-trial MiniLM study's training time; benchmarks/RESULTS.md, session 23). :class:`CapturedStep`
(``capture_step``) runs the same two regions uncompiled (the forward with its weighted loss, its
backward, clipping and the capturable AdamW whose learning rate is a device tensor) and records
them, per bucket, as one CUDA graph: a step is then one copy of the batch into the graph's input
tensors and one replay. No compiler: recording a bucket costs about one step.

Per bucket (``Batch.shape``): its first step runs eager on a side stream (the warm-up a recording
needs: the optimizer's state, the libraries' workspaces), its second is recorded and replayed, and
every later one is replayed; the clock times those first steps of each shape apart
(``SETUP_OCCURRENCES``). What a graph reads and writes stays where it was recorded:

- the batch is copied into the bucket's own input tensors;
- the gradients, made by the first backward, are zeroed in place inside the graph and never set
  to ``None``, so every bucket's graph accumulates into the same tensors;
- the learning rate is a tensor the scheduler fills in place between replays; the loss is added
  into ``loss_sum`` inside the graph;
- autocast casts without its cache, as PyTorch's CUDA-graph recipe asks (``make_graphed_callables``
  refuses it); each weight is cast once a forward either way, the casts recorded with the rest.

A step's graphs share one memory pool (:class:`CudaGraphs` says why that is safe here).
Recorders are pluggable: :class:`CudaGraphs` on CUDA; :class:`EagerReplay` runs the same body again
at each "replay", which is how the CPU tests check all of the above (a CPU has no CUDA graphs).
Refused where the compiled step is, off CUDA, and for a forward not known to read nothing on the
host (``trial_executor.device._defaults.whole_step_refusal``). Off by default until a GPU says it takes
the host off the pace (``benchmarks.step_capture``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch.profiler import record_function

from trial_executor.batches import Batch, to_device
from trial_executor.precision import PrecisionPolicy
from trial_executor.train._compiled import WholeStep
from trial_executor.train._optimizer import LearningRateSchedule
from trial_executor.train._step import STEP_RANGE

WARMUP_OCCURRENCES = 1  # eager steps of a bucket before it is recorded (SETUP_OCCURRENCES: warm-up, recording, first replay)


@functools.cache
def _side_stream(device: int) -> torch.cuda.Stream:
    # One for the process: cuBLAS keeps a workspace per stream it ever ran on, which empty_cache never frees
    # (pytorch/pytorch#99196), and torch hands out new streams from a pool of 32.
    return torch.cuda.Stream(device)


def warm_up_on_side_stream(step: Callable[[], None], times: int = 1) -> None:
    """``step`` run ``times`` times on a side stream, as a CUDA-graph recording needs first; synced back (CUDA only)."""
    side = _side_stream(torch.cuda.current_device())
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            step()
    torch.cuda.current_stream().wait_stream(side)


class GraphRecorder(Protocol):
    """How :class:`CapturedStep` warms a bucket up and records its body into something it replays."""

    def warm_up(self, step: Callable[[], None]) -> None: ...

    def record(self, body: Callable[[], None]) -> Callable[[], None]: ...


class CudaGraphs:
    """PyTorch's whole-network recipe: warm-up on a side stream, then ``torch.cuda.graph``; one memory pool for all.

    The graphs of a step share one pool, though they replay in any order: what a body allocates it
    also frees within the recording (gradients, optimizer state, ``loss_sum``, the rate and the inputs
    live outside every pool), so no graph reads memory another's replay writes. One pool a graph
    would hold every bucket's activations at once (up to 4 buckets packed, 10 widths on the HF forward).
    """

    def __init__(self) -> None:
        self.pool: Any = None  # the first graph's, shared by the rest

    def warm_up(self, step: Callable[[], None]) -> None:
        warm_up_on_side_stream(step)

    def record(self, body: Callable[[], None]) -> Callable[[], None]:
        graph = torch.cuda.CUDAGraph()
        # thread_local, as inductor records: a DataLoader's pin-memory thread allocating while this thread
        # records is no error of the recording ("global", the default, fails the recording for it).
        stream = torch.cuda.current_stream()
        try:
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                body()
        except BaseException:
            torch.cuda.set_stream(stream)  # the graph's exit leaves its capture stream current where ending the capture raised
            raise
        self.pool = self.pool if self.pool is not None else graph.pool()
        return graph.replay  # which keeps the graph alive as long as the step keeps it


class EagerReplay:
    """Records nothing: a replay runs the body again, on the same tensors (the step's logic without CUDA graphs)."""

    def __init__(self) -> None:
        self.recorded = 0

    def warm_up(self, step: Callable[[], None]) -> None:
        step()

    def record(self, body: Callable[[], None]) -> Callable[[], None]:
        self.recorded += 1
        return body


class CapturedStep(WholeStep):
    """:class:`WholeStep` recorded per bucket and replayed (see the module); ``recorder``: :class:`CudaGraphs` by default."""

    autocast_cache = False

    def __init__(
        self, model: torch.nn.Module, forward: Callable[..., Any], optimizer: torch.optim.Optimizer,
        scheduler: LearningRateSchedule, policy: PrecisionPolicy,
        *, max_grad_norm: float | None, device: torch.device, loss_sum: float = 0.0, recorder: GraphRecorder | None = None,
    ) -> None:
        super().__init__(model, forward, optimizer, scheduler, policy, max_grad_norm=max_grad_norm, device=device, loss_sum=loss_sum)
        self.recorder = recorder if recorder is not None else CudaGraphs()
        self.warmed: dict[tuple[tuple[int, ...], ...], int] = {}  # eager steps taken per bucket
        # Per bucket: its input tensors (the graph's addresses) and its replay.
        self.recorded: dict[tuple[tuple[int, ...], ...], tuple[dict[str, torch.Tensor], Callable[[], None]]] = {}

    def _body(self, inputs: dict[str, torch.Tensor]) -> None:
        self.optimizer.zero_grad(set_to_none=False)  # in place: the gradients stay where every graph reads them
        loss = self._loss(**inputs)
        loss.backward()
        self.loss_sum += loss.detach() * inputs["row_weight"].sum()  # summed per row, as TrainStep's (rows: a graph input)
        with torch.no_grad():
            self._update()

    def _record(self, batch: Batch) -> tuple[dict[str, torch.Tensor], Callable[[], None]]:
        """Record ``batch``'s bucket: its own input tensors (copies: on the CPU ``to_device`` hands back the batch's) and its replay."""
        static = {name: tensor.to(self.device, non_blocking=True, copy=True) for name, tensor in batch.inputs.items()}
        recorded = self.recorded[batch.shape] = (static, self.recorder.record(lambda: self._body(static)))
        return recorded

    def __call__(self, window: Sequence[Sequence[Batch]]) -> None:
        batch = self.one_batch(window)
        with record_function(STEP_RANGE):
            warmed = self.warmed.get(batch.shape, 0)
            if batch.shape not in self.recorded and warmed < WARMUP_OCCURRENCES:
                self.warmed[batch.shape] = warmed + 1
                self.recorder.warm_up(lambda: self._body(to_device(batch.inputs, self.device)))
            else:
                static, replay = self.recorded.get(batch.shape) or self._record(batch)
                for name, tensor in batch.inputs.items():
                    static[name].copy_(tensor, non_blocking=True)
                replay()
            self.scheduler.step()  # fills the learning-rate tensors in place, read by the next replay
