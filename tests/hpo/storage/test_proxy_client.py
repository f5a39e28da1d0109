"""A ``grpc://`` worker's storage against a real ``python -m hpo.proxy`` on PostgreSQL, stopped, hung and killed for real."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from _proxy_process import free_port, serve, stop
from optuna.trial import TrialState

from hpo import create_storage
from hpo.storage._db_errors import StorageFailedError
from hpo.storage._proxy_client import ProxyStorage, call_deadline


@pytest.fixture
def proxies() -> Iterator[list]:
    """Every proxy process a test starts, killed at its end."""
    started: list = []
    yield started
    for proc in started:
        stop(proc)


def _direct_trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=url).get_trials()


@pytest.mark.postgres
def test_a_study_goes_on_through_a_proxy_restart_and_writes_each_trial_once(
    pg_database: str, proxies: list, caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    proxies.append(serve(pg_database, port))
    storage = create_storage(f"grpc://127.0.0.1:{port}")
    study = optuna.create_study(study_name="restart", storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))

    def restart_proxy() -> None:
        """The proxy dies, and its supervisor starts another within seconds."""
        stop(proxies[-1])
        threading.Timer(2.0, lambda: proxies.append(serve(pg_database, port))).start()
        time.sleep(0.5)  # gRPC has seen its connection close: the next call is refused before it is sent

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -1, 1)
        if trial.number == 1:
            restart_proxy()  # under a running trial: the trial's next calls wait for the new proxy
        return x

    with caplog.at_level(logging.WARNING, logger="hpo.storage"):
        study.optimize(objective, n_trials=3)
        assert f"lost the storage proxy at 127.0.0.1:{port}" in caplog.text
        # A trial's creation, which a repeat after the proxy applied it would make twice: refused before it was
        # sent, it is repeated once the proxy is back, and makes one trial.
        restart_proxy()
        storage.set_trial_state_values(storage.create_new_trial(study._study_id), TrialState.FAIL)
        assert f"storage call CreateNewTrial lost the storage proxy at 127.0.0.1:{port}" in caplog.text

    trials = _direct_trials(pg_database, "restart")
    assert [(t.number, t.state) for t in trials] == [(n, TrialState.COMPLETE) for n in range(3)] + [(3, TrialState.FAIL)]
    assert [t.value for t in trials[:3]] == [t.params["x"] for t in trials[:3]]


def test_a_proxy_gone_past_the_bound_is_one_line_and_the_outages_later_calls_fail_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 2.0)  # the workers' 300 s, shortened
    port = free_port()  # nothing listens: every call is refused before it is sent
    storage = ProxyStorage(host="127.0.0.1", port=port)
    started = time.monotonic()
    with pytest.raises(StorageFailedError) as raised:
        storage.get_all_studies()
    assert 1.0 < time.monotonic() - started < 20
    line = str(raised.value)
    assert line.startswith(f"storage proxy 127.0.0.1:{port} unreachable for 2 s (storage call GetAllStudies: failed to connect")
    assert "\n" not in line and "bring the proxy (python -m hpo.proxy) back, then rerun the same command" in line
    started = time.monotonic()
    with pytest.raises(StorageFailedError, match=r"unreachable for 2 s \(storage call CreateNewTrial"):
        storage.create_new_trial(0)
    assert time.monotonic() - started < 1.0  # the same outage: no second wait


@pytest.mark.postgres
def test_a_hung_proxy_costs_one_deadline_and_a_call_lost_in_flight_is_not_repeated(
    pg_database: str, proxies: list, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 1.0)
    assert call_deadline() == 3.0  # the proxy's own wait for its database, and a margin
    port = free_port()
    proxies.append(serve(pg_database, port))
    storage = create_storage(f"grpc://127.0.0.1:{port}")
    study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "hung")
    proxy = proxies[-1]
    os.kill(proxy.pid, signal.SIGSTOP)  # hung: the connection stays up, nothing answers
    try:
        started = time.monotonic()
        with pytest.raises(StorageFailedError, match=rf"storage proxy 127\.0\.0\.1:{port} did not answer within 3 s \(storage call GetAllStudies"):
            storage.get_all_studies()
        assert time.monotonic() - started < 10
        started = time.monotonic()  # the same outage: the next call does not get a whole deadline again (it got five)
        with pytest.raises(StorageFailedError, match="did not answer within"):
            storage.get_study_directions(study_id)
        assert time.monotonic() - started < 2.5

        # Another worker's trial creation sent, then the proxy killed before it answers: it may have been applied,
        # so it is one line at once, not a second trial.
        other = ProxyStorage(host="127.0.0.1", port=port)
        outcome: list[BaseException] = []
        caller = threading.Thread(target=lambda: outcome.append(_raised(lambda: other.create_new_trial(study_id))))
        caller.start()
        time.sleep(1.0)
        os.kill(proxy.pid, signal.SIGKILL)
        caller.join(timeout=10)
    finally:
        stop(proxy)
    assert not caller.is_alive() and isinstance(outcome[0], StorageFailedError), outcome
    assert "went away while it applied the call (whether it did is unknown, so it is not repeated)" in str(outcome[0])
    assert "storage call CreateNewTrial" in str(outcome[0])


def _raised(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except BaseException as err:  # the outcome under test
        return err
    raise AssertionError("the call returned")


@pytest.mark.postgres
def test_a_worker_of_a_run_waits_for_a_proxy_that_restarts_as_it_starts(
    pg_database: str, proxies: list, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--workers N``: the parent reached the proxy, so a worker that finds it down meets a restart, and waits for it
    (it exited 2, "cannot reach the storage proxy", as a first process does for a wrong URL)."""
    monkeypatch.setattr("hpo.storage._storage._GRPC_CONNECT_TIMEOUT", 1.0)  # a first contact's 10 s, shortened
    port = free_port()  # the proxy is down as the worker starts; its supervisor brings it back a second later
    supervisor = threading.Timer(1.0, lambda: proxies.append(serve(pg_database, port)))
    supervisor.start()
    started = time.monotonic()
    try:
        storage = create_storage(f"grpc://127.0.0.1:{port}", wait_for_server=True)
        assert storage.get_all_studies() == []
        assert 1.0 < time.monotonic() - started < 90
    finally:
        supervisor.join()  # its proxy is in ``proxies`` before the fixture stops them


def test_a_proxy_whose_storage_fails_is_told_apart_from_a_proxy_gone(tmp_path: Path, proxies: list) -> None:
    """The proxy up, its SQLite file deleted: the line said "bring the proxy back", which was up all along."""
    port = free_port()
    database = tmp_path / "served.db"
    proxies.append(serve(f"sqlite:///{database}", port))
    storage = create_storage(f"grpc://127.0.0.1:{port}")
    study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "served")
    database.unlink()
    with pytest.raises(StorageFailedError) as failed:
        storage.create_new_trial(study_id)
    line = str(failed.value)
    assert f"storage proxy 127.0.0.1:{port} failed (UNKNOWN) (storage call CreateNewTrial:" in line
    assert "was deleted while in use" in line and "; fix what the proxy reports, then rerun the same command" in line
    assert "bring the proxy" not in line and "\n" not in line


def test_a_lost_final_write_is_reported_by_its_own_line_not_by_optunas_reread() -> None:
    """Optuna's _run_trial re-reads a trial whose final write failed; the re-read fails at once (the outage is given up),
    and its finally raises UnboundLocalError. The line shown was the re-read's ("GetTrial ... unreachable")."""
    from hpo.storage._retrying_storage import storage_failure_in

    def run_trial_as_optuna_does() -> None:
        updated_state = None
        try:
            try:
                raise StorageFailedError("storage call SetTrialStateValues: went away while it applied the call")
            except Exception:
                raise StorageFailedError("storage call GetTrial: unreachable")  # noqa: B904 (as Optuna raises it)
        finally:
            del updated_state
            updated_state  # noqa: B018, F821 (Optuna's UnboundLocalError)

    with pytest.raises(UnboundLocalError) as masked:
        run_trial_as_optuna_does()
    assert str(storage_failure_in(masked.value)) == "storage call SetTrialStateValues: went away while it applied the call"
