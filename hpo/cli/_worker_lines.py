"""What the command of ``--workers N`` makes of its workers' stderr: which of them said why they stopped."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hpo._api import Run
from hpo.study._budget import finished_count


class WorkerErrors:
    """Shows each worker's stderr line through ``show(index, line)``, and remembers whose last line was its own closing
    line (``PROG: error: ...``, a stop line; not a warning): such a worker needs no "exited with code N" after it."""

    def __init__(self, prog: str, show: Callable[[int, str], None]) -> None:
        self._prog = prog
        self._show = show
        self._said_why: set[int] = set()

    def __call__(self, index: int, line: str) -> None:
        self._said_why.discard(index)
        if line.startswith(f"{self._prog}: ") and not line.startswith(f"{self._prog}: warning:"):
            self._said_why.add(index)
        self._show(index, line)

    def said_why(self, index: int) -> bool:
        return index in self._said_why


def budget_met(run: Run, *, explained: bool) -> bool:
    """Whether the study holds its budget after a worker failed (the others may have finished it). Where every failed
    worker said why (``explained``) and the study cannot be read (the storage they stopped on), False: the error is
    theirs to give, not the command's a second time."""
    try:
        return finished_count(run.prepared.study) >= run.options.n_trials
    except Exception:
        if explained:
            return False
        raise


def without_workers_flag(argv: Sequence[str]) -> list[str]:
    """``argv`` without its ``--workers N``: the command line each worker runs (with ``--workers 1``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    return out
