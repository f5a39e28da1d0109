"""Ways a trial can end that are the config's fault, not a bug, or the caller's stop: the caller records and moves on; and
the chain of errors one was raised over (:func:`error_chain`), where a caller finds the error that decides.

Torch-free, so that a caller can catch them without importing the training code (a run whose budget is met never does)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def error_chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the exceptions it was raised from or while handling, innermost last."""
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


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


class UnsupportedPrecisionError(RuntimeError):
    """The device cannot run the requested precision; the trial must not silently use another."""


class TrialInterrupted(RuntimeError):
    """The caller asked the run to stop (e.g. on SIGTERM); the run saved a checkpoint first if it could."""

    def __init__(self, step: int, checkpoint: Path | None) -> None:
        super().__init__(f"interrupted at optimizer step {step}")
        self.step = step
        self.checkpoint = checkpoint
