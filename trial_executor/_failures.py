"""Ways a trial can end that are the config's fault, not a bug: the caller records and moves on."""

from __future__ import annotations


class NonFiniteLossError(RuntimeError):
    """The loss went NaN/inf (bf16/fp32), or GradScaler skipped too many steps in a row (fp16)."""

    def __init__(self, step: int, detail: str) -> None:
        super().__init__(detail)
        self.step = step
        self.detail = detail


class TrialOutOfMemoryError(RuntimeError):
    """The device (CUDA OOM) or the host (``MemoryError``) ran out of memory; memory has been released."""

    def __init__(self, batch_size: int, grad_accum_steps: int, detail: str) -> None:
        super().__init__(detail)
        self.batch_size = batch_size
        self.grad_accum_steps = grad_accum_steps
        self.detail = detail
