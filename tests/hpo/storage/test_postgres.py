"""Studies on the real PostgreSQL server at 127.0.0.1:5432 (a throwaway database per test)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml
from _tiny_study import assert_trial_records
from conftest import ROOT, SMALL_SPACE, cli_args, run_cli
from optuna.trial import TrialState

from hpo import finished_count, mask_url
from hpo.cli._run import main as run_main

pytestmark = pytest.mark.postgres

SECRET = "Sup3rSecretPw"


def _with_password(url: str) -> str:
    # The server trusts local connections, so any password connects; it must never be shown.
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")


def _tables(url: str) -> list[str]:
    engine = sqlalchemy.create_engine(url)
    try:
        return sqlalchemy.inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_full_study_on_postgres_never_shows_the_password(
    pg_database: str, tmp_path: Path, small_space: Path, small_data: Path, capfd: pytest.CaptureFixture[str],
) -> None:
    url = _with_password(pg_database)
    # The first run in this process (torch is loaded already), everything written to its stdout and stderr captured.
    assert run_main([*cli_args(url, small_space, small_data, "--study-name", "pg"), "--n-trials", "2"]) == 0
    first = capfd.readouterr()
    assert SECRET not in first.out + first.err
    assert mask_url(url) in first.out and "***" in first.out

    # Another process ("another machine") resumes and extends the same study.
    second = run_cli(
        [*cli_args(url.replace("postgresql://", "postgresql+psycopg2://"), small_space, small_data, "--study-name", "pg"),
         "--n-trials", "3"],
        cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    study = optuna.load_study(study_name="pg", storage=url)
    assert finished_count(study) == 3
    for trial in study.get_trials(states=(TrialState.COMPLETE,)):
        assert_trial_records(trial)
    engine = sqlalchemy.create_engine(pg_database)
    with engine.connect() as connection:
        stored = [
            row[0]
            for table in ("study_user_attributes", "study_system_attributes", "trial_user_attributes", "trial_system_attributes")
            for row in connection.execute(sqlalchemy.text(f"SELECT value_json FROM {table}"))
        ]
    engine.dispose()
    assert any("hardware" in value or "cpu" in value for value in stored)
    assert not [value for value in stored if SECRET in value]


def test_bad_space_creates_nothing_in_postgres(pg_database: str, tmp_path: Path, small_data: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**SMALL_SPACE, "pruner": {"type": "asha"}}))
    proc = run_cli(cli_args(pg_database, bad, small_data), cwd=tmp_path)
    assert proc.returncode == 2 and "unknown type 'asha'" in proc.stderr
    assert _tables(pg_database) == []


def test_unreachable_server_is_one_masked_line(tmp_path: Path, pg_server: str) -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/hpo"
    proc = run_cli(["--storage", url], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "cannot reach PostgreSQL at 127.0.0.1:1" in proc.stderr
    assert SECRET not in proc.stderr + proc.stdout


def test_missing_database_names_the_fix(tmp_path: Path, pg_server: str) -> None:
    url = pg_server.rsplit("/", 1)[0] + "/hpo_no_such_db"
    proc = run_cli(["--storage", url], cwd=tmp_path)
    assert proc.returncode == 2 and "database 'hpo_no_such_db' does not exist" in proc.stderr and "createdb" in proc.stderr



def test_connection_errors_name_what_the_server_was_asked_for(pg_server: str) -> None:
    """The URL's own fields are not what libpq used: without a database it takes the user's name, and a
    ?host= in the query wins over the URL's host. The messages named None and 127.0.0.1."""
    from hpo import StorageError
    from hpo.storage._storage import check_storage_url

    server = pg_server.rsplit("/", 1)[0]
    with pytest.raises(StorageError, match=r"cannot resolve the host 'db\.invalid' of the storage URL"):
        check_storage_url(f"{pg_server}?host=db.invalid")
    engine = sqlalchemy.create_engine(pg_server, isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.pool.NullPool)
    with engine.connect() as connection:
        connection.execute(sqlalchemy.text("CREATE ROLE hpo_test_no_own_db LOGIN"))
    try:
        with pytest.raises(StorageError) as refused:
            check_storage_url(server.replace("postgres@", "hpo_test_no_own_db@", 1))
        assert "database 'hpo_test_no_own_db' does not exist" in str(refused.value)
        assert str(refused.value).endswith("-U hpo_test_no_own_db hpo_test_no_own_db`"), refused.value
    finally:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("DROP ROLE hpo_test_no_own_db"))



@pytest.mark.parametrize("command", ["status", "report", "best", "dashboard"])
def test_reading_commands_never_write_optunas_tables_into_a_database_no_study_ran_in(
    pg_database: str, command: str, capfd: pytest.CaptureFixture[str],
) -> None:
    from hpo.__main__ import main as hpo_main

    assert hpo_main([command, "--storage", pg_database]) == 2
    assert f"no study in {pg_database}: it holds no Optuna tables; pass the --storage the study was run with" in capfd.readouterr().err
    assert _tables(pg_database) == []  # a mistyped database name got the schema written into it


WORKER = """
import sys
import optuna
from hpo import create_storage, load_search_space, open_study
from trial_executor import demo_dataset
storage = create_storage(sys.argv[1])
study = open_study(storage, "together", load_search_space(), demo_dataset(n_train=50, n_valid=10), seed=0)
print("opened", study.study_name)
"""


def test_workers_starting_at_once_on_an_empty_database(pg_database: str, tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, pg_database], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [p.communicate(timeout=180) for p in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert "opened together" in out
    assert optuna.get_all_study_names(pg_database) == ["together"]


def test_a_table_creation_colliding_with_another_workers_is_retried(pg_database: str, caplog: pytest.LogCaptureFixture) -> None:
    """A worker's CREATE TABLEs meet another's still in flight: the open is retried, not failed.

    The table-creation lock is a session lock: a connection kill ends the session of its holder
    while that worker's CREATE TABLEs may still run on another connection, and the next worker
    takes the lock and creates too. Here the other worker's tables wait uncommitted in a
    transaction; the worker under test, finding no schema and the lock free, creates its own,
    which collide (PostgreSQL refuses the second type of one name) once that transaction commits.
    """
    from optuna.storages._rdb import models as optuna_models

    from hpo.storage import create_storage

    other = sqlalchemy.create_engine(pg_database, poolclass=sqlalchemy.pool.NullPool)
    opened: list[object] = []
    try:
        with other.connect() as connection:
            transaction = connection.begin()
            optuna_models.BaseModel.metadata.create_all(connection)  # uncommitted: invisible to the worker
            worker = threading.Thread(target=lambda: opened.append(_open_or_error(create_storage, pg_database)))
            caplog.set_level(logging.WARNING, logger="hpo.storage")
            worker.start()
            # The worker's first CREATE TABLE now waits on this transaction's catalog rows.
            deadline = time.monotonic() + 60
            while not _waiting_on_a_lock(other, pg_database) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert time.monotonic() < deadline, "the worker never reached its CREATE TABLE"
            transaction.commit()
        worker.join(timeout=120)
    finally:
        other.dispose()
    assert not worker.is_alive() and len(opened) == 1
    assert not isinstance(opened[0], BaseException), opened[0]
    assert "opening the storage met another worker creating the schema" in caplog.text
    study = optuna.create_study(storage=opened[0], study_name="after-the-collision")
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    assert optuna.get_all_study_names(pg_database) == ["after-the-collision"]


def _open_or_error(create_storage: Callable[[str], object], url: str) -> object:
    try:
        return create_storage(url)
    except BaseException as err:  # reported by the test's assertion
        return err


def _waiting_on_a_lock(engine: sqlalchemy.Engine, url: str) -> bool:
    """Whether a session of ``url``'s database waits on a lock (asked on a connection of its own:
    a transaction sees one snapshot of pg_stat_activity)."""
    with engine.connect() as connection:
        return bool(connection.execute(sqlalchemy.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND wait_event_type = 'Lock'"
        ), {"db": url.rsplit("/", 1)[1]}).scalar())
