"""StopSignal: the first SIGINT/SIGTERM asks the trial to checkpoint and stop; a second means now, wherever it lands."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator

import pytest

from hpo.study._workers import StopSignal


@pytest.fixture()
def stop() -> Iterator[StopSignal]:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    stop = StopSignal()
    stop.install()
    try:
        yield stop
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        sys.unraisablehook = hook


class _Finalized:
    """An object whose finalizer is where the second signal lands (as in a gc callback while a checkpoint saves)."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs at one of these bytecodes, inside the finalizer
            pass


def test_a_second_signal_ignored_in_a_finalizer_is_raised_at_the_next_poll_without_a_traceback(
    stop: StopSignal, capsys: pytest.CaptureFixture[str],
) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.requested() and stop.exit_code == 143  # the first: recorded, nothing raised
    _Finalized()  # its finalizer runs here, and Python ignores the KeyboardInterrupt raised in it
    assert stop.interrupt_owed
    with pytest.raises(KeyboardInterrupt):
        stop.requested()
    assert stop.requested()  # owed once: the KeyboardInterrupt is not raised again
    assert "KeyboardInterrupt" not in capsys.readouterr().err


def test_a_second_signal_raised_where_it_lands_is_not_owed_again(stop: StopSignal) -> None:
    """Owed only where Python ignored it: a StopSignal owing every second signal would raise it twice."""
    os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):
            pass
    assert not stop.interrupt_owed and stop.requested() and stop.exit_code == 130


def test_other_ignored_errors_reach_the_previous_hook(stop: StopSignal) -> None:
    seen = []
    stop._unraisable_hook = lambda unraisable: seen.append(type(unraisable.exc_value))

    class Failing:
        def __del__(self) -> None:
            raise ValueError("a finalizer's own error")

    Failing()
    assert seen == [ValueError] and not stop.interrupt_owed


def test_an_owed_interrupt_is_the_main_threads_to_raise_not_another_threads(stop: StopSignal) -> None:
    """Optuna's heartbeat thread polls the stop while it retries a storage call: it must not take the interrupt."""
    os.kill(os.getpid(), signal.SIGTERM)
    _Finalized()
    polled: list[bool] = []
    other = threading.Thread(target=lambda: polled.append(stop.requested()))
    other.start()
    other.join()
    assert polled == [True] and stop.interrupt_owed
    with pytest.raises(KeyboardInterrupt):
        stop.requested()
