"""Every storage write the project retries, its connection dropped after COMMIT: the outcome is the one without the fault.

Each scenario runs twice through ``create_storage``, on an empty database each time: once
plainly, once with the connection of its write dropped after the COMMIT went through (a real
fault in the real storage: SQLAlchemy's ``after_commit`` hook raises a lost connection). The
return value, the exception and every row in the database must agree: no orphan study or
trial, no trial stuck RUNNING, no wrong exception, no lost values.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import pytest
from _storage_faults import dropped_connection, fresh_storage_factory, snapshot
from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

if TYPE_CHECKING:
    from hpo.storage._retrying_storage import RetryingStorage


MIN = [StudyDirection.MINIMIZE]
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(autouse=True)
def _short_retry_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hpo.storage._backoff._FIRST_DELAY", 0.05)  # the test is about what a retry does, not when


@dataclass(frozen=True)
class Write:
    """``setup(storage) -> context``, then the write under test ``act(storage, context) -> comparable result``."""

    setup: Callable[[RetryingStorage], Any]
    act: Callable[[RetryingStorage, Any], Any]


def _study(storage: RetryingStorage) -> int:
    return storage.create_new_study(MIN, "s")


def _running_trial(storage: RetryingStorage) -> tuple[int, int]:
    study_id = _study(storage)
    return study_id, storage.create_new_trial(study_id)


def _waiting_trial(storage: RetryingStorage) -> int:
    study_id = _study(storage)
    return storage.create_new_trial(study_id, create_trial(state=TrialState.WAITING, params={"x": 0.25}, distributions={"x": FloatDistribution(0, 1)}))


def _number(storage: RetryingStorage, trial_id: int) -> int:
    return storage.get_trial(trial_id).number


WRITES: dict[str, Write] = {
    "create_named_study": Write(lambda s: None, lambda s, _: s.get_study_name_from_id(s.create_new_study(MIN, "named"))),
    "create_unnamed_study": Write(lambda s: None, lambda s, _: s.get_study_name_from_id(s.create_new_study(MIN)).startswith("no-name-")),
    "delete_study": Write(_study, lambda s, study_id: s.delete_study(study_id)),
    "set_study_user_attr": Write(_study, lambda s, study_id: s.set_study_user_attr(study_id, "k", [1, 2])),
    "set_study_system_attr": Write(_study, lambda s, study_id: s.set_study_system_attr(study_id, "k", {"a": 1})),
    "create_new_trial": Write(_study, lambda s, study_id: _number(s, s.create_new_trial(study_id))),
    "enqueue_trial": Write(
        _study, lambda s, study_id: _number(s, s.create_new_trial(study_id, create_trial(state=TrialState.WAITING, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)})))
    ),
    "claim_waiting_trial": Write(_waiting_trial, lambda s, trial_id: s.set_trial_state_values(trial_id, TrialState.RUNNING)),
    "finish_trial": Write(_running_trial, lambda s, ids: s.set_trial_state_values(ids[1], TrialState.COMPLETE, [1.5])),
    "fail_trial": Write(_running_trial, lambda s, ids: s.set_trial_state_values(ids[1], TrialState.FAIL)),
    "set_trial_param": Write(_running_trial, lambda s, ids: s.set_trial_param(ids[1], "x", 0.5, FloatDistribution(0, 1))),
    "set_trial_intermediate_value": Write(_running_trial, lambda s, ids: s.set_trial_intermediate_value(ids[1], 3, 0.75)),
    "set_trial_user_attr": Write(_running_trial, lambda s, ids: s.set_trial_user_attr(ids[1], "k", "v")),
    "set_trial_user_attrs": Write(_running_trial, lambda s, ids: s.set_trial_user_attrs(ids[1], {"k": "v", "n": [1, 2], "none": None})),
    "set_trial_system_attr": Write(_running_trial, lambda s, ids: s.set_trial_system_attr(ids[1], "k", 7)),
    "record_heartbeat": Write(_running_trial, lambda s, ids: s.record_heartbeat(ids[1])),
}


def _outcome(storage: RetryingStorage, url: str, write: Write, *, fault: bool) -> tuple[Any, Any]:
    context = write.setup(storage)
    try:
        if fault:
            with dropped_connection(storage) as left:
                result: Any = write.act(storage, context)
            assert left == [0], "the fault was never injected"
        else:
            result = write.act(storage, context)
    except Exception as err:  # compared below: the same exception must come with and without the fault
        result = type(err).__name__
    return result, snapshot(url)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_write_whose_connection_dropped_after_commit_ends_as_without_the_fault(
    backend: str, name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fresh = fresh_storage_factory(backend, tmp_path, request)
    expected = _outcome(*fresh(), WRITES[name], fault=False)
    actual = _outcome(*fresh(), WRITES[name], fault=True)
    assert actual == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_claim_retried_after_another_worker_claimed_the_trial_is_refused(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The claim's connection drops before COMMIT; while it waits, another worker claims the trial: False, not True."""
    storage, url = fresh_storage_factory(backend, tmp_path, request)()
    other = optuna.storages.RDBStorage(url)
    trial_id = _waiting_trial(storage)
    with _when_retrying(lambda: other.set_trial_state_values(trial_id, TrialState.RUNNING)), dropped_connection(storage, after_commit=False):
        assert storage.set_trial_state_values(trial_id, TrialState.RUNNING) is False
    other.engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_finish_retried_after_another_worker_finished_the_trial_raises_and_keeps_their_values(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The finish's connection drops before COMMIT; meanwhile the trial is failed elsewhere (a stale sweep): not "done"."""
    storage, url = fresh_storage_factory(backend, tmp_path, request)()
    other = optuna.storages.RDBStorage(url)
    _, trial_id = _running_trial(storage)
    with (
        _when_retrying(lambda: other.set_trial_state_values(trial_id, TrialState.FAIL)),
        dropped_connection(storage, after_commit=False),
        pytest.raises(optuna.exceptions.UpdateFinishedTrialError),
    ):
        storage.set_trial_state_values(trial_id, TrialState.COMPLETE, [1.5])
    assert other.get_trial(trial_id).state == TrialState.FAIL and other.get_trial(trial_id).values is None
    other.engine.dispose()


@contextlib.contextmanager
def _when_retrying(action: Callable[[], object]) -> Iterator[None]:
    """Runs ``action`` once, at the storage's first "lost its database connection; retry" warning."""
    pending = [action]
    handler = logging.Handler()
    handler.emit = lambda record: pending and pending.pop()()  # type: ignore[method-assign]
    logging.getLogger("hpo.storage").addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger("hpo.storage").removeHandler(handler)
    assert not pending, "the call was never retried"
