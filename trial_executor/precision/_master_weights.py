"""bf16 compute weights refreshed once per optimizer step from the model's fp32 weights (issue 23, item 5).

Under autocast every forward casts each weight to bf16 again, and every op on the autocast lists
dispatches a cast of its inputs: on the host, about 20% more operations per step than fp32
(tiny-bert, batch 32, eager: 2,183 against 1,756). Here the model's parameters stay float32:
they are the *master* weights, the ones the optimizer updates, clipping measures, checkpoints
save and the final model is written from. :class:`MasterWeights` keeps a bfloat16 copy of each and
swaps the copies into their modules only while a forward runs (:meth:`MasterWeights.computing`),
so the forward and its backward compute in bf16 with no cast per weight: layer norms, softmax and
the loss then run in bf16 too (with float32 accumulation inside the kernels), which is what
"bf16" means with ``master_weights`` on. Gradients are accumulated over a window's micro-batches
in float32 buffers that become the masters' gradients at the optimizer step; the copies are
refreshed from the masters before the next forward (one multi-tensor copy).

The swap is a dictionary assignment per parameter (no tensor operation). Recomputing a forward
during the backward (gradient checkpointing) or tracing one (a compiled step) would see the
masters, so :mod:`trial_executor.device._defaults` never combines them with this.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class MasterWeights:
    """``model``'s floating-point parameters as ``dtype`` copies for the forward; the model keeps float32 masters."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        copies: dict[int, torch.nn.Parameter] = {}  # tied weights: one copy per master
        self._slots: list[tuple[torch.nn.Module, str, torch.nn.Parameter, torch.nn.Parameter]] = []
        for module in model.modules():
            for name, master in module._parameters.items():
                if master is None or not master.is_floating_point():
                    continue
                if id(master) not in copies:
                    copies[id(master)] = torch.nn.Parameter(master.detach().to(dtype), requires_grad=master.requires_grad)
                self._slots.append((module, name, master, copies[id(master)]))
        pairs = {id(m): (m, c) for _, _, m, c in self._slots if m.requires_grad}
        self.masters = [m for m, _ in pairs.values()]
        self._copies = [c for _, c in pairs.values()]
        self._grads = [torch.zeros_like(m) for m in self.masters]  # float32: the masters' gradients at each step
        self._summed = [False] * len(self.masters)  # whether a micro-batch of this window gave the parameter a gradient
        self._stale = True  # the copies lag the masters (built, restored, or stepped since the last refresh)

    @contextlib.contextmanager
    def computing(self) -> Iterator[None]:
        """Run the enclosed forward on the bf16 copies (refreshed first if the masters moved); the masters are back after."""
        if self._stale:
            with torch.no_grad():
                torch._foreach_copy_(self._copies, self.masters)
            self._stale = False
        for module, name, _, copy in self._slots:
            module._parameters[name] = copy
        try:
            yield
        finally:
            for module, name, master, _ in self._slots:
                module._parameters[name] = master

    def collect_gradients(self) -> None:
        """After a backward: add the copies' gradients into the float32 buffers (the first of a window copies)."""
        first, more = ([], []), ([], [])
        for i, (buffer, copy) in enumerate(zip(self._grads, self._copies, strict=True)):
            if copy.grad is not None:
                target = more if self._summed[i] else first
                target[0].append(buffer)
                target[1].append(copy.grad)
                self._summed[i] = True
                copy.grad = None
        with torch.no_grad():
            if first[0]:
                torch._foreach_copy_(*first)
            if more[0]:
                torch._foreach_add_(*more)

    def hand_gradients_to_masters(self) -> None:
        """Before clipping and the optimizer step: each master's gradient is its buffer (``None`` if it got none)."""
        for master, buffer, summed in zip(self.masters, self._grads, self._summed, strict=True):
            master.grad = buffer if summed else None
        self._summed = [False] * len(self.masters)

    def masters_stepped(self) -> None:
        """The optimizer changed the masters: the next forward refreshes the copies."""
        self._stale = True
