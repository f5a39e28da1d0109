"""Eight worker processes open one PostgreSQL study and run it while the server terminates their connections.

The faults are the database's own (``pg_terminate_backend`` on every connection to this test's
database, every second, from before the first worker starts until the last one ends), so they
hit every stage of a worker: opening the storage (the table-creation lock, Optuna's CREATE
TABLEs and first reads), opening the study, asking, heartbeats and finishing trials.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import psycopg2
import pytest
from conftest import PG_ADMIN_URL, ROOT
from optuna.trial import TrialState

from hpo._attrs import BUDGET_SLOT_ATTR, skip_reason_of
from hpo.storage._storage import StorageError, create_storage
from hpo.study import counts_toward_budget
from hpo.study._budget import take_slot
from hpo.study._outcomes import SKIP_OVER_BUDGET

pytestmark = pytest.mark.postgres

WORKERS, BUDGET, KILL_EVERY = 8, 32, 1.0
# A worker as `python -m hpo.run` is one, minus training: the project's storage, study and budget, a trivial objective.
WORKER = """
import sys, time
import optuna
from hpo.storage._storage import Heartbeat, create_storage
from hpo.study import run_to_budget
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage = create_storage(sys.argv[1], heartbeat=Heartbeat(interval=2, grace_period=60))
study = optuna.create_study(storage=storage, study_name="kills", load_if_exists=True)
def objective(trial):
    x = trial.suggest_float("x", -1, 1)
    time.sleep(0.05)
    return x * x
mine = []
run_to_budget(study, objective, int(sys.argv[2]), on_trial_finished=lambda trial, count: mine.append(trial.number))
print("finished", *mine)
"""


def _terminate_connections(database: str, stop: threading.Event, killed: list[int]) -> None:
    """Every ``KILL_EVERY`` s, terminate every connection to ``database`` (only that one) until ``stop``."""
    admin = psycopg2.connect(PG_ADMIN_URL.replace("postgresql://", "postgres://"))
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            while not stop.is_set():
                cursor.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()", (database,),
                )
                killed.append(cursor.fetchone()[0])
                stop.wait(KILL_EVERY)
    finally:
        admin.close()


def test_workers_started_and_running_under_connection_kills_all_finish_the_budget(pg_database: str, tmp_path: Path) -> None:
    database = pg_database.rsplit("/", 1)[1]
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_terminate_connections, args=(database, stop, killed), daemon=True)
    killer.start()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    workers = []
    try:
        for log in logs:
            with log.open("w") as out:
                workers.append(subprocess.Popen([sys.executable, "-c", WORKER, pg_database, str(BUDGET)], env=env, stdout=out, stderr=subprocess.STDOUT))
        codes = [worker.wait(timeout=240) for worker in workers]
    finally:
        stop.set()
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.kill()
        killer.join(timeout=10)

    outputs = [log.read_text() for log in logs]
    assert codes == [0] * WORKERS, [out[-2000:] for code, out in zip(codes, outputs, strict=True) if code]
    assert sum(killed) >= WORKERS, killed  # the faults did hit the workers' connections
    assert any("lost its database connection" in out for out in outputs)
    storage = optuna.storages.RDBStorage(pg_database)
    try:
        trials = optuna.load_study(study_name="kills", storage=storage).get_trials()
    finally:
        storage.engine.dispose()
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers)) == max(numbers) + 1  # no number duplicated or skipped
    # None RUNNING, none lost to a fault: every trial completed, or found no slot of the budget left
    # (two workers finishing together: the second asked for a trial, started none, and stopped).
    assert [t for t in trials if t.state != TrialState.COMPLETE and skip_reason_of(t) != SKIP_OVER_BUDGET] == []
    # Each trial a worker finished is in the study once, and the budget is met exactly.
    reported = sorted(int(n) for out in outputs for line in out.splitlines() if line.startswith("finished") for n in line.split()[1:])
    assert reported == numbers
    assert sum(counts_toward_budget(t) for t in trials) == BUDGET == sum(t.state == TrialState.COMPLETE for t in trials)


def test_a_worker_waits_for_a_database_that_stays_down_then_fails_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A worker of --workers N (wait_for_server) retries even a refused connection, within the bound.
    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 1.5)
    monkeypatch.setattr("hpo.storage._backoff._FIRST_DELAY", 0.1)
    with caplog.at_level(logging.WARNING, logger="hpo.storage"), pytest.raises(StorageError) as raised:
        create_storage("postgresql://postgres:pw-secret@127.0.0.1:1/hpo", wait_for_server=True)
    assert str(raised.value).startswith("cannot reach PostgreSQL at 127.0.0.1:1 (is the server running?)")
    assert "\n" not in str(raised.value) and "pw-secret" not in str(raised.value)
    assert "opening the storage lost its database connection" in caplog.text and "retry 3" in caplog.text


def test_a_slot_written_by_an_attempt_that_lost_its_lock_is_counted_again_and_given_back_when_over(pg_database: str) -> None:
    """The race the connection-kill test once hit (33 trials for a budget of 32), played in order.

    Worker A writes its slot, then its lock's connection is killed, which releases the lock
    before A's transaction ends; worker B, locking meanwhile, takes the last slot. A's retry
    must count again without its own slot and give it back, not accept it as taken.
    """
    study = optuna.create_study(storage=create_storage(pg_database), study_name="race")
    for _ in range(2):
        study.tell(study.ask(), 1.0)
    a, b = study.ask(), study.ask()
    assert take_slot(study, b, n_trials=3)  # B, under the lock A lost, takes the last slot (2 finished)
    a.set_user_attr(BUDGET_SLOT_ATTR, a.number)  # A's first attempt writes its slot all the same
    assert not take_slot(study, a, n_trials=3)  # A's retry: 2 finished and B's, without A's own: full
    assert study.trials[a.number].user_attrs[BUDGET_SLOT_ATTR] is None and b.user_attrs[BUDGET_SLOT_ATTR] == b.number
    c = study.ask()
    c.set_user_attr(BUDGET_SLOT_ATTR, c.number)  # the same lost lock, with room left: the slot stays
    assert take_slot(study, c, n_trials=5) and study.trials[c.number].user_attrs[BUDGET_SLOT_ATTR] == c.number
