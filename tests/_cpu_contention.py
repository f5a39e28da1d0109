"""A real rival for this process's cores: a spinning process beside it on one core (no mock of the scheduler)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

import torch


def _pin_threads(cpus: set[int]) -> None:
    # sched_setaffinity(0) moves the calling thread only: every thread of this process goes.
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(thread), cpus)


@contextlib.contextmanager
def sharing_one_core() -> Iterator[None]:
    """This process on one core, one torch thread, with a busy process on the same core: each gets about half of it."""
    cpus = os.sched_getaffinity(0)
    core, threads = min(cpus), torch.get_num_threads()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, {core})
        _pin_threads({core})
        torch.set_num_threads(1)
        yield
    finally:
        spinner.kill()
        spinner.wait()
        _pin_threads(cpus)
        torch.set_num_threads(threads)
