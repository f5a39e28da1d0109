"""Worker processes on one machine, and how a worker stops on SIGINT/SIGTERM without losing its trial."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, ClassVar

from hpo._attrs import FAIL_REASON_ATTR
from hpo._process import usable_cpus
from hpo.study._liveness import GPU_SHARED_ENV
from hpo.study._outcomes import INTERRUPTED
from trial_executor._failures import error_chain

if TYPE_CHECKING:
    import optuna

# Set in each worker started by run_workers: its index among the machine's workers, and the pid of the launcher.
WORKER_INDEX_ENV = "HPO_WORKER_INDEX"
LAUNCHER_PID_ENV = "HPO_LAUNCHER_PID"
LAUNCHER_POLL_S = 0.1  # a getppid() ten times a second costs nothing; an orphan of a fast trial stops within a few steps


def worker_index() -> int | None:
    """This process's index among the workers of ``--workers N`` (or the Ray actors); ``None`` in the command itself."""
    index = os.environ.get(WORKER_INDEX_ENV)
    return None if index is None else int(index)


def watch_launcher() -> None:
    """In a worker of ``--workers N``: once its launcher is gone (SIGKILL, the OOM killer), stop as on SIGTERM.

    Each worker runs in its own session: with its launcher gone, no Ctrl-C reaches it and no one relays its lines, yet
    it trained on to the end of the budget. Now its trial is checkpointed, failed ``interrupted`` and re-queued for a
    rerun, as on SIGTERM; what it still prints goes to ``/dev/null`` (its stdout and stderr were pipes to the launcher).
    Nothing in a process that is not such a worker.
    """
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher is None:
        return

    def watch() -> None:
        while os.getppid() == int(launcher):  # an orphan's parent is init, or the nearest subreaper
            time.sleep(LAUNCHER_POLL_S)
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        stop = StopSignal.installed()
        if stop is None or stop.signum is None:  # already stopping (the launcher's signal came first): a second would skip the checkpoint
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def announce_once(line: str) -> None:
    """Print ``line`` from the command itself or from worker 0, not once per worker of the run."""
    if worker_index() in (None, 0):
        print(line, flush=True)


class StopSignal:
    """Records SIGINT/SIGTERM instead of dying at once, so the running trial can checkpoint and end cleanly.

    ``requested()`` is what the executor polls after each optimizer step; ``exit_code`` is the
    shell convention 128 + signal number (130 for SIGINT, 143 for SIGTERM). While the writes that
    decide a trial run (:func:`defer_second_signal`), a second signal waits for their end; a third does not.
    """

    _installed: ClassVar[StopSignal | None] = None

    def __init__(self) -> None:
        self.signum: int | None = None
        # A second signal's KeyboardInterrupt not raised where it landed: Python ignored it there, or it was deferred.
        self.interrupt_owed = False
        self.deferring = False
        self._unraisable_hook: Callable[[Any], object] = sys.unraisablehook

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)
        self._unraisable_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        StopSignal._installed = self

    @classmethod
    def installed(cls) -> StopSignal | None:
        """The StopSignal handling this process's SIGINT now, if one does."""
        stop = cls._installed
        return stop if stop is not None and signal.getsignal(signal.SIGINT) == stop._handle else None

    def _unraisable(self, unraisable: Any) -> None:
        # The handler's KeyboardInterrupt raised inside a finalizer or a gc callback (a README audit saw a second
        # Ctrl-C land in one while the first's checkpoint was taken) is "ignored" there: Python prints it with a
        # traceback and goes on as after one signal. It is owed instead: the main thread's next requested() raises it.
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.signum is not None:
            self.interrupt_owed = True
            return
        self._unraisable_hook(unraisable)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            if self.deferring and not self.interrupt_owed:
                self.interrupt_owed = True
                if sys.stderr.isatty():
                    print("received a second signal: stopping once the trial's outcome is stored (again: at once)", file=sys.stderr, flush=True)
                return
            # A second signal means "now": skip the checkpoint. KeyboardInterrupt, which Optuna
            # catches to mark the running trial FAIL (SystemExit would leave it RUNNING).
            self.interrupt_owed = False  # a deferred one is this one now
            raise KeyboardInterrupt
        self.signum = signum
        if sys.stderr.isatty():  # feedback for a person at the terminal; logs get the one closing line
            print(f"received {signal.Signals(signum).name}: checkpointing the running trial, then stopping", file=sys.stderr, flush=True)

    def requested(self) -> bool:
        """Whether a signal came; in the main thread, raises the KeyboardInterrupt of a second one that Python ignored
        where it landed or deferred (another thread, Optuna's heartbeat retrying a storage call, must not take it)."""
        if self.interrupt_owed and not self.deferring and threading.current_thread() is threading.main_thread():
            self.interrupt_owed = False
            raise KeyboardInterrupt
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum is not None else 0


def defer_second_signal() -> None:
    """From here to :func:`end_deferral`, a second signal is owed instead of raised where it lands (a third is raised).

    For the writes that decide a trial (its result, a queued trial handed back) and Optuna's tell
    after them: interrupted there, a decided trial was re-queued and run again, or a queued one lost.
    Nothing without an installed :class:`StopSignal`, or outside the main thread (where no signal lands).
    """
    stop = StopSignal.installed()
    if stop is not None and threading.current_thread() is threading.main_thread():
        stop.deferring = True


def end_deferral(*, raise_owed: bool = True) -> None:
    """End :func:`defer_second_signal`'s deferral; with ``raise_owed``, raise the second signal's KeyboardInterrupt now if
    one came meanwhile (else the main thread's next ``requested()`` poll raises it)."""
    stop = StopSignal.installed()
    if stop is not None and threading.current_thread() is threading.main_thread():
        stop.deferring = False
        if raise_owed:
            stop.requested()


def second_signal_in(err: BaseException) -> bool:
    """Whether ``err`` is a second signal's KeyboardInterrupt (:class:`StopSignal`), or an error raised over one."""
    return any(isinstance(link, KeyboardInterrupt) for link in error_chain(err))


def stop_on_second_signal(trial: optuna.Trial, err: BaseException) -> None:
    """Where ``err`` is a second signal's (:func:`second_signal_in`), end the run with a KeyboardInterrupt (``err``, or
    one raised from it), ``trial`` marked ``interrupted`` for the run to re-queue; else return."""
    if not second_signal_in(err):
        return
    with contextlib.suppress(Exception):  # a storage down, say: the run re-queues it all the same (a FAIL with no reason)
        trial.set_user_attr(FAIL_REASON_ATTR, INTERRUPTED)
    if isinstance(err, KeyboardInterrupt):
        raise err
    raise KeyboardInterrupt from err


def run_workers(
    argv: Sequence[str], workers: int, gpus: Sequence[str] | None, *,
    output: Callable[[int, str], None] | None = None, errors: Callable[[int, str], None] | None = None,
    tick: Callable[[], None] | None = None, tick_every: float = 2.0,
) -> list[int]:
    """Run ``python -m hpo.run ARGV`` in ``workers`` processes of this machine; return each one's exit code
    (the shell's way: 128 + N for a worker killed by signal N).

    With ``gpus``, worker ``i`` sees only ``gpus[i % len(gpus)]`` (``CUDA_VISIBLE_DEVICES``). The machine's
    cores are shared out (``OMP_NUM_THREADS``, unless already set). SIGINT/SIGTERM are passed on to every
    worker, each of which checkpoints its trial and stops. With ``output`` (``errors``), each line a worker
    prints to stdout (stderr) goes to ``output(index, line)`` (``errors(index, line)``) instead; ``tick()``
    is called every ``tick_every`` seconds while workers run.
    """
    children: list[subprocess.Popen[str]] = []
    stopping = threading.Event()
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def forward(signum: int, frame: FrameType | None) -> None:
        first, handler = not stopping.is_set(), previous[signum]
        stopping.set()  # a signal while the workers start: no more of them
        if first and isinstance(getattr(handler, "__self__", None), StopSignal):
            handler(signum, frame)  # type: ignore[operator]  # the command's own: it knows the run was stopped, not its workers killed
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # Before the first worker starts: a signal that came while they started killed this process alone, and the
    # workers started so far (each in its own session, out of reach of a Ctrl-C) trained on.
    for signum in previous:
        signal.signal(signum, forward)
    readers: list[threading.Thread] = []
    try:
        for index in range(workers):
            if stopping.is_set():
                break
            children.append(_start_worker(index, argv, workers, gpus, output is not None, errors is not None))
        readers = [
            threading.Thread(target=_relay, args=(index, stream, relay), daemon=True)
            for index, child in enumerate(children)
            for stream, relay in ((child.stdout, output), (child.stderr, errors)) if relay is not None and stream is not None
        ]
        for reader in readers:
            reader.start()
        for child in children:
            while True:
                try:
                    child.wait(timeout=tick_every)
                    break
                except subprocess.TimeoutExpired:
                    if tick is not None:
                        tick()
        for reader in readers:
            reader.join()
        codes = [child.returncode for child in children]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    # A child killed by a signal reports -N; report it the shell's way.
    return [128 - code if code < 0 else code for code in codes]


def _start_worker(
    index: int, argv: Sequence[str], workers: int, gpus: Sequence[str] | None, pipe_stdout: bool, pipe_stderr: bool,
) -> subprocess.Popen[str]:
    """Worker ``index`` of ``workers`` (:func:`run_workers`), in a session of its own."""
    # Each worker's torch would otherwise start one thread per core: N workers on one machine
    # oversubscribe it, and spinning OpenMP threads made 2 CPU workers on 2 cores ~20x slower.
    threads = {"OMP_NUM_THREADS": str(max(1, usable_cpus() // workers))}
    env = {**threads, **os.environ, WORKER_INDEX_ENV: str(index), LAUNCHER_PID_ENV: str(os.getpid())}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
        # Workers given the same GPU index share it: their trials' speeds are contended (see the report).
        env[GPU_SHARED_ENV] = str(sum(gpus[i % len(gpus)] == env["CUDA_VISIBLE_DEVICES"] for i in range(workers)))
    # Own session: a terminal Ctrl-C reaches the workers once, through run_workers' forward(), not twice.
    return subprocess.Popen(
        [sys.executable, "-m", "hpo.run", *argv, "--workers", "1"], env=env, start_new_session=True,
        stdout=subprocess.PIPE if pipe_stdout else None, stderr=subprocess.PIPE if pipe_stderr else None, text=True,
    )


def exit_described(code: int) -> str:
    """A worker's exit code in words: ``code 1``, ``signal 9 (SIGKILL)``."""
    if code > 128:
        with contextlib.suppress(ValueError):
            return f"signal {code - 128} ({signal.Signals(code - 128).name})"
    return f"code {code}"


def _relay(index: int, stream: IO[str], output: Callable[[int, str], None]) -> None:
    for line in stream:
        output(index, line.rstrip("\n"))
