"""StopSignal: the first SIGINT/SIGTERM asks the trial to checkpoint and stop; a second means now, or, where it lands in the
writes that decide a trial, as soon as that trial is told; a third means now."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from hpo import create_storage, make_objective, open_study, parse_search_space, run_to_budget
from hpo._attrs import BUDGET_SLOT_ATTR, MEMORY_AFTER_ATTR, RESULT_ATTRS, SKIP_REASON_ATTR, STEPS_ATTR
from hpo.study._outcomes import SKIP_OVER_BUDGET
from hpo.study._workers import StopSignal, defer_second_signal, end_deferral
from trial_executor import demo_dataset


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


def test_a_second_signal_in_a_deferral_is_owed_until_its_end_and_a_third_is_raised_at_once(stop: StopSignal) -> None:
    os.kill(os.getpid(), signal.SIGINT)
    defer_second_signal()
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(10_000):  # the handler runs at one of these bytecodes: it must not raise here
        pass
    assert stop.interrupt_owed and stop.requested()  # a poll inside the deferral does not raise it either
    with pytest.raises(KeyboardInterrupt):
        end_deferral()
    assert not stop.interrupt_owed and not stop.deferring

    defer_second_signal()
    os.kill(os.getpid(), signal.SIGINT)  # owed
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)  # a third: at once, and the owed one is this one
        for _ in range(10_000):
            pass
    end_deferral()  # nothing owed is left to raise
    assert stop.requested() and not stop.interrupt_owed


def test_a_deferral_without_the_stop_signal_as_the_handler_is_nothing(stop: StopSignal) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # another handler now: this StopSignal no longer decides
    defer_second_signal()
    assert not stop.deferring and StopSignal.installed() is None
    end_deferral()


@contextlib.contextmanager
def _signals_at(first: Callable[[str, Any], bool], second: Callable[[str, Any], bool]) -> Iterator[list[str]]:
    """Send SIGINT to this process as the storage executes the first statement ``first(statement, parameters)`` accepts,
    then again at the next one ``second`` accepts: a real database, a real signal, at a chosen write. Yields what it hit."""
    hit: list[str] = []

    def before(connection: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if len(hit) < 2 and (second if hit else first)(statement, parameters):
            hit.append(statement)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):  # the handler runs here, inside the write, as a signal landing mid-write would
                pass

    sqlalchemy.event.listen(sqlalchemy.Engine, "before_cursor_execute", before)
    try:
        yield hit
    finally:
        sqlalchemy.event.remove(sqlalchemy.Engine, "before_cursor_execute", before)


def _user_attr(key: str) -> Callable[[str, Any], bool]:
    def writes(statement: str, parameters: Any) -> bool:
        values = parameters.values() if isinstance(parameters, dict) else parameters or ()
        return "trial_user_attributes" in statement and statement.startswith(("INSERT", "UPDATE")) and key in values
    return writes


def _tell(statement: str, parameters: Any) -> bool:
    return statement.startswith("UPDATE trials SET") and "state" in statement


FIXED = {"model": "tiny-bert", "batch_size": 16, "max_steps": 3, "eval_every": 0, "max_length": 32}
FIRST_RESULT = next(iter(RESULT_ATTRS))


@pytest.mark.parametrize("second", [_user_attr(MEMORY_AFTER_ATTR), _tell], ids=["its-last-attrs", "optunas-tell"])
def test_a_second_signal_in_a_trained_trials_last_writes_ends_the_run_once_it_is_told_not_rerun(
    stop: StopSignal, tmp_path: Path, second: Callable[[str, Any], bool],
) -> None:
    """The first signal once the trial has trained (its results being written, in one statement), the second in its last
    attrs' write (the memory after it) or in Optuna's tell: the trial was failed ``interrupted`` and re-queued, and a rerun trained it again. Now it is told COMPLETE first."""
    data = demo_dataset(n_train=64, n_valid=16, seed=1)
    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}}, "fixed": FIXED})
    study = open_study(create_storage(f"sqlite:///{tmp_path / 's.db'}"), "s", space, data, seed=0)
    objective = make_objective(space, data, base_seed=0, device="cpu", stop_requested=stop.requested)
    with _signals_at(_user_attr(FIRST_RESULT), second) as hit, pytest.raises(KeyboardInterrupt):
        run_to_budget(study, objective, 1, stop_requested=stop.requested, on_told=objective.told)
    assert len(hit) == 2
    [trial] = study.get_trials()  # no retry waits
    assert trial.state == TrialState.COMPLETE and set(RESULT_ATTRS) <= set(trial.user_attrs) and trial.user_attrs[STEPS_ATTR] == 3
    assert not stop.deferring and not stop.interrupt_owed


class _AnotherWorkerTakesTheLastSlot(optuna.samplers.RandomSampler):
    """While this worker claims its queued trial, another takes the budget's last slot; this process's first signal then lands."""

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        other = study._storage.create_new_trial(study._study_id)
        study._storage.set_trial_user_attr(other, BUDGET_SLOT_ATTR, study._storage.get_trial(other).number)


def test_a_second_signal_while_a_queued_trial_goes_back_to_the_queue_loses_no_trial(stop: StopSignal, tmp_path: Path) -> None:
    """The hand-back of a queued trial that lost the last slot: interrupted in its copy's write, the copy was lost."""
    study = optuna.create_study(storage=create_storage(f"sqlite:///{tmp_path / 'race.db'}"), study_name="race",
                                sampler=_AnotherWorkerTakesTheLastSlot())
    study.enqueue_trial({"x": 0.5}, user_attrs={"fp32_baseline": True})
    slot_taken = _user_attr(BUDGET_SLOT_ATTR)  # the other worker's slot: this worker's first signal lands then
    copy_written = lambda statement, parameters: statement.startswith("INSERT INTO trials ")  # noqa: E731
    with _signals_at(slot_taken, copy_written) as hit, pytest.raises(KeyboardInterrupt):
        run_to_budget(study, lambda trial: trial.suggest_float("x", 0, 1), n_trials=1, stop_requested=stop.requested)
    assert len(hit) == 2
    mine, other, copy = study.get_trials()
    assert mine.state == TrialState.PRUNED and mine.user_attrs[SKIP_REASON_ATTR] == SKIP_OVER_BUDGET
    assert other.state == TrialState.RUNNING
    assert copy.state == TrialState.WAITING and copy.system_attrs["fixed_params"] == {"x": 0.5}
