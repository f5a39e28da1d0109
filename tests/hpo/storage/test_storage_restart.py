"""Storage calls wait out a PostgreSQL restart: the study goes on and loses nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import optuna
import pytest
import sqlalchemy
from _private_postgres import PrivatePostgres
from optuna.trial import TrialState

from hpo import create_storage
from hpo.storage import set_user_attrs
from hpo.storage._backoff import waiting_ends_on
from hpo.storage._db_errors import StorageFailedError
from hpo.storage._storage import Heartbeat

pytestmark = pytest.mark.postgres


def test_a_study_survives_a_database_restart(private_postgres: PrivatePostgres) -> None:
    storage = create_storage(private_postgres.url)
    study = optuna.create_study(storage=storage, study_name="restart")
    errors: list[BaseException] = []

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -1, 1)
        for step in range(3):
            time.sleep(0.05)
            trial.report(x * step, step)
            trial.set_user_attr(f"seen_{step}", step)
        return x * x

    def optimize() -> None:
        try:
            study.optimize(objective, n_trials=30)
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    worker = threading.Thread(target=optimize)
    worker.start()
    while len(study.get_trials(states=(TrialState.COMPLETE,))) < 5:
        time.sleep(0.1)
    private_postgres.stop()
    time.sleep(3)  # calls fail meanwhile and are retried
    private_postgres.start()
    worker.join(timeout=120)

    assert not worker.is_alive() and not errors, errors
    states = [t.state for t in study.get_trials()]
    assert states.count(TrialState.COMPLETE) == 30 and len(states) == 30
    assert all(t.user_attrs == {"seen_0": 0, "seen_1": 1, "seen_2": 2} for t in study.get_trials())


def _through_a_restart(server: PrivatePostgres, call: Callable[[], object], outage: float) -> object:
    """``call()`` in a thread started with the server down, which comes back ``outage`` seconds later: its value or its error."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as err:  # the caller's assertion reports it
            outcome.append(err)

    server.stop()
    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(outage)
    server.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and len(outcome) == 1, "the call never returned"
    return outcome[0]


# Each public call that makes Optuna's _CachedStorage call a private RDBStorage method (named by
# the key) or the heartbeat interface: the retry must cover what runs beneath the cache.
_CACHE_CALLS: dict[str, Callable[[Any, int, int], object]] = {
    "_get_trials": lambda storage, study_id, trial_id: storage.get_all_trials(study_id),
    "_create_new_trial": lambda storage, study_id, trial_id: storage.create_new_trial(study_id),
    "_set_trial_param": lambda storage, study_id, trial_id: storage.set_trial_param(
        trial_id, "y", 0.5, optuna.distributions.FloatDistribution(0, 1)
    ),
    "_get_best_trial_id": lambda storage, study_id, trial_id: storage.get_best_trial(study_id),
    "_get_stale_trial_ids": lambda storage, study_id, trial_id: storage._get_stale_trial_ids(study_id),
}
_PUBLIC_CALL = {"_get_trials": "get_all_trials", "_create_new_trial": "create_new_trial", "_set_trial_param": "set_trial_param",
                "_get_best_trial_id": "get_best_trial", "_get_stale_trial_ids": "_get_stale_trial_ids"}


@pytest.mark.parametrize("private_method", sorted(_CACHE_CALLS))
def test_optunas_cache_calling_the_backend_directly_also_waits_out_a_restart(
    private_postgres: PrivatePostgres, private_method: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Optuna's _CachedStorage calls these private methods, not the public ones; a restart under
    ``_get_trials`` once failed a CI run of the test above. The wrapper sits above the cache."""
    storage = create_storage(private_postgres.url, heartbeat=Heartbeat())
    study = optuna.create_study(storage=storage, study_name="cache")
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    running_trial_id = storage.create_new_trial(study._study_id)
    storage.get_all_trials(study._study_id)  # the cache knows the running trial, as after Study.ask
    # Optuna retries trial creation itself, for up to 8 s; the outage must outlast that.
    outage = 9 if private_method == "_create_new_trial" else 1.5
    with caplog.at_level(logging.WARNING, logger="hpo.storage"):
        outcome = _through_a_restart(private_postgres, lambda: _CACHE_CALLS[private_method](storage, study._study_id, running_trial_id), outage)
    assert not isinstance(outcome, BaseException), outcome
    assert f"storage call {_PUBLIC_CALL[private_method]} lost its database connection" in caplog.text


def test_a_trials_attrs_written_together_wait_out_a_restart_and_land_whole(
    private_postgres: PrivatePostgres, caplog: pytest.LogCaptureFixture,
) -> None:
    """set_user_attrs goes beside Optuna's cache, straight to the database: retried like every call, all of it stored once."""
    storage = create_storage(private_postgres.url)
    trial = optuna.create_study(storage=storage, study_name="together").ask()
    attrs = {f"result_{i}": {"value": i / 4, "text": f"row {i}"} for i in range(34)}
    with caplog.at_level(logging.WARNING, logger="hpo.storage"):
        outcome = _through_a_restart(private_postgres, lambda: set_user_attrs(trial, attrs), 1.5)
    assert outcome is None, outcome
    assert "storage call set_trial_user_attrs lost its database connection" in caplog.text
    assert storage.get_trial(trial._trial_id).user_attrs == attrs == trial.user_attrs


def _raised_like_optuna_get_trials_after_a_restart() -> optuna.exceptions.StorageInternalError:
    """The chain seen when PostgreSQL restarts under ``RDBStorage._get_trials`` (worker log of a failed run).

    Its first query loses the connection (OperationalError); its fallback query, in the same
    session, then fails with PendingRollbackError; the session wrapper re-raises that as
    StorageInternalError.
    """
    try:
        try:
            try:
                raise sqlalchemy.exc.OperationalError("SELECT trial_values ...", {}, Exception("terminating connection due to administrator command"))
            except sqlalchemy.exc.OperationalError:
                raise sqlalchemy.exc.PendingRollbackError("Can't reconnect until invalid transaction is rolled back") from None
        except sqlalchemy.exc.PendingRollbackError as err:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from err
    except optuna.exceptions.StorageInternalError as err:
        return err
    raise AssertionError("unreachable")


def test_a_lost_connection_is_recognised_anywhere_in_the_chain_and_data_errors_are_not() -> None:
    from hpo.storage._db_errors import is_lost_connection

    assert is_lost_connection(_raised_like_optuna_get_trials_after_a_restart())
    try:
        raise optuna.exceptions.StorageInternalError("commit failed") from sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate key"))
    except optuna.exceptions.StorageInternalError as err:
        assert not is_lost_connection(err)


def test_a_database_down_past_the_bound_stops_each_call_of_that_outage_at_once(
    private_postgres: PrivatePostgres, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """One outage, one bound: a worker whose database stays down stops after it, not after a bound per call."""
    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 2.0)
    monkeypatch.setattr("hpo.storage._backoff._FIRST_DELAY", 0.1)
    storage = create_storage(private_postgres.url)
    study = optuna.create_study(storage=storage, study_name="down")
    trial = study.ask()
    private_postgres.stop()
    with caplog.at_level(logging.WARNING, logger="hpo.storage"):
        with pytest.raises(StorageFailedError, match=r"unreachable for 2 s \(storage call set_trial_user_attr\)") as failed:
            trial.set_user_attr("first", 1)
        assert "retry 1 " in caplog.text and "\n" not in str(failed.value)
        caplog.clear()
        for call in (lambda: trial.report(0.5, 1), lambda: trial.set_user_attr("second", 2)):
            with pytest.raises(StorageFailedError):
                call()
        assert "retry" not in caplog.text  # the same outage: given up on at once, not waited out again
    private_postgres.start()
    trial.set_user_attr("third", 3)  # back: the stale connection is replaced, and a later outage gets a whole bound
    assert study.trials[0].user_attrs == {"third": 3}


def test_a_worker_told_to_stop_while_its_database_is_down_does_not_wait_for_it(
    private_postgres: PrivatePostgres, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGINT or SIGTERM during an outage ended the worker only after the bound (300 s): now at once, with one line."""
    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 60.0)
    storage = create_storage(private_postgres.url)
    trial = optuna.create_study(storage=storage, study_name="told").ask()
    private_postgres.stop()
    stopped = threading.Event()
    threading.Timer(1.0, stopped.set).start()  # as the worker's signal handler records a stop
    started = time.monotonic()
    try:
        with waiting_ends_on(stopped.is_set), pytest.raises(StorageFailedError) as failed:
            trial.set_user_attr("lost", 1)
        assert time.monotonic() - started < 4.0
        assert "unreachable and not waited for: this worker was told to stop (storage call set_trial_user_attr)" in str(failed.value)
    finally:
        private_postgres.start()


def test_a_trial_silent_through_a_database_restart_is_not_stale_until_the_server_has_been_up_for_the_grace_period(
    private_postgres: PrivatePostgres,
) -> None:
    """No heartbeat can land while the server is down: a restart longer than the grace period must not fail live trials."""
    storage = create_storage(private_postgres.url, heartbeat=Heartbeat(interval=1, grace_period=3))
    study = optuna.create_study(storage=storage, study_name="silent")
    trial = study.ask()
    storage.record_heartbeat(trial._trial_id)
    private_postgres.stop()
    time.sleep(4)  # down for longer than the grace period
    private_postgres.start()
    optuna.storages.fail_stale_trials(study)  # a worker sweeping the moment the server is back, as Optuna does per trial
    assert study.trials[0].state == TrialState.RUNNING  # its worker may beat again: not stale yet
    time.sleep(3.5)  # up for the grace period, and still no heartbeat: its worker is gone
    optuna.storages.fail_stale_trials(study)
    assert study.trials[0].state == TrialState.FAIL
