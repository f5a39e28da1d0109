"""Worker processes on one machine, and how a worker stops on SIGINT/SIGTERM without losing its trial."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType


class StopSignal:
    """Records SIGINT/SIGTERM instead of dying at once, so the running trial can checkpoint and end cleanly.

    ``requested()`` is what the executor polls after each optimizer step; ``exit_code`` is the
    shell convention 128 + signal number (130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            # A second signal means "now": skip the checkpoint.
            raise SystemExit(128 + signum)
        self.signum = signum
        print(f"received {signal.Signals(signum).name}: checkpointing the running trial, then stopping", file=sys.stderr, flush=True)

    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum is not None else 0


def run_workers(argv: Sequence[str], workers: int, gpus: Sequence[str] | None) -> int:
    """Run ``python -m hpo.run ARGV`` in ``workers`` processes of this machine; return the worst exit code.

    With ``gpus``, worker ``i`` sees only ``gpus[i % len(gpus)]`` (``CUDA_VISIBLE_DEVICES``).
    SIGINT/SIGTERM are passed on to every worker, each of which checkpoints its trial and stops.
    """
    children = []
    for index in range(workers):
        env = {**os.environ, "HPO_WORKER_INDEX": str(index)}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
        # Own session: a terminal Ctrl-C reaches the workers once, through forward(), not twice.
        children.append(subprocess.Popen([sys.executable, "-m", "hpo.run", *argv, "--workers", "1"], env=env, start_new_session=True))

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        codes = [child.wait() for child in children]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    failed = [code for code in codes if code != 0]
    # A child killed by a signal reports -N; report it the shell's way.
    return max((128 - code if code < 0 else code) for code in failed) if failed else 0
