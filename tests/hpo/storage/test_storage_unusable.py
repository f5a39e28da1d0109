"""A storage that waiting cannot fix fails at once with one line: a SQLite file deleted or read-only is not a lost connection."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from hpo import StorageError, create_storage
from hpo.cli._parsing import run_guarded
from hpo.storage._db_errors import is_lost_connection
from hpo.storage._retrying_storage import StorageFailedError
from hpo.storage._storage import Heartbeat


def _storage_with_a_study(tmp_path: Path, **kwargs: object) -> tuple[optuna.storages.BaseStorage, int, Path]:
    path = tmp_path / "s.db"
    storage = create_storage(f"sqlite:///{path}", **kwargs)  # type: ignore[arg-type]
    return storage, storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "s"), path


def _fails_at_once(call: object, match: str, caplog: pytest.LogCaptureFixture) -> str:
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="hpo.storage"), pytest.raises(StorageFailedError, match=match) as failure:
        call()  # type: ignore[operator]
    assert time.monotonic() - started < 5, "retried as if the connection were lost"
    assert "lost its database connection" not in caplog.text
    message = str(failure.value)
    assert len(message.splitlines()) == 1 and "rerun to resume" in message
    return message


def test_a_sqlite_file_deleted_while_in_use_fails_the_next_call_at_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    storage, study_id, path = _storage_with_a_study(tmp_path)
    os.remove(path)
    message = _fails_at_once(lambda: storage.create_new_trial(study_id), "was deleted", caplog)
    assert str(path) in message


def test_a_read_only_sqlite_database_fails_a_write_at_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """SQLite's own read-only mode (``PRAGMA query_only``, as file permissions do not bind root): SQLITE_READONLY."""
    storage, study_id, _ = _storage_with_a_study(tmp_path)
    sqlalchemy.event.listen(storage.engine, "connect", lambda connection, record: connection.execute("PRAGMA query_only = ON"))
    storage.engine.dispose()  # new connections, read-only
    _fails_at_once(lambda: storage.set_study_user_attr(study_id, "k", 1), "readonly database", caplog)


@pytest.mark.postgres
def test_a_read_only_postgres_database_fails_a_write_at_once(pg_database: str, caplog: pytest.LogCaptureFixture) -> None:
    """PostgreSQL refusing writes (SQLSTATE 25006, as on a hot standby) is not a lost connection either."""
    storage = create_storage(pg_database)
    study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "s")

    def read_only(connection: object, record: object) -> None:
        with connection.cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute("SET default_transaction_read_only = on")
        connection.commit()  # type: ignore[attr-defined]  # else SQLAlchemy's reset on return rolls the SET back

    sqlalchemy.event.listen(storage.engine, "connect", read_only)
    storage.engine.dispose()  # new connections, read-only
    message = _fails_at_once(lambda: storage.set_study_user_attr(study_id, "k", 1), "read-only transaction", caplog)
    assert "postgres" in message


def test_a_locked_sqlite_database_is_waited_out(tmp_path: Path) -> None:
    """SQLite's one transient error: another process holds the write lock."""
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    engine = sqlalchemy.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    with pytest.raises(sqlalchemy.exc.OperationalError, match="locked") as locked, engine.begin() as connection:
        connection.execute(sqlalchemy.text("INSERT INTO t VALUES (1)"))
    holder.close()
    engine.dispose()
    assert is_lost_connection(locked.value)


def test_a_worker_whose_sqlite_file_is_deleted_mid_study_stops_with_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Through Optuna's optimize loop and its heartbeat thread, as ``python -m hpo.run`` runs them."""
    storage, _, path = _storage_with_a_study(tmp_path, heartbeat=Heartbeat(interval=1, grace_period=60))
    study = optuna.load_study(study_name="s", storage=storage)

    def objective(trial: optuna.Trial) -> float:
        if trial.number == 1:
            os.remove(path)
            time.sleep(1.5)  # the heartbeat thread meets the missing file too
        return trial.suggest_float("x", 0, 1)

    started = time.monotonic()
    code = run_guarded("hpo-run", f"sqlite:///{path}", lambda: study.optimize(objective, n_trials=5) or 0)
    assert code == 1 and time.monotonic() - started < 10
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("[I ")]  # Optuna's own INFO lines
    assert len(lines) == 1 and "was deleted" in lines[0], err


@pytest.mark.parametrize("keeping_best", [False, True], ids=["no-best-model", "keeping-best-model"])
def test_a_trial_whose_storage_fails_mid_trial_keeps_its_checkpoint_and_leaves_no_scratch_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keeping_best: bool,
) -> None:
    """The objective's last attr writes failed too, before the checkpoints were closed: each such trial left its
    hpo-trial-N-* scratch directory in /tmp. Its stored checkpoint, which its retry resumes from, must stay.
    As ``python -m hpo run`` keeps the best model, the trial's final-model directory (hpo-trial-N-model-*) stayed
    too: only the tell, which never came, removed it."""
    import contextlib
    import tempfile

    from optuna.artifacts import FileSystemArtifactStore

    from hpo import make_objective, open_study, parse_search_space
    from hpo.storage._best_model import keeping_best_model
    from hpo.storage._retrying_storage import storage_failure_in
    from hpo.study import RunOptions
    from trial_executor import demo_dataset

    scratch_root, artifacts = tmp_path / "tmp", tmp_path / "artifacts"
    scratch_root.mkdir()
    artifacts.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    path = tmp_path / "s.db"
    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}}, "fixed": {
        "model": "tiny-bert", "batch_size": 16, "eval_batch_size": 8, "max_steps": 6, "eval_every": 2, "max_length": 32}})
    data = demo_dataset(n_train=64, n_valid=16, seed=4)
    study = open_study(create_storage(f"sqlite:///{path}"), "s", space, data, seed=0)

    def database_deleted_after_the_first_checkpoint(trial: optuna.Trial, step: int, metrics: dict[str, float]) -> None:
        if step >= 4:
            os.remove(path)

    objective = make_objective(space, data, RunOptions(seed=0, device="cpu", artifact_store=str(artifacts)),
                               checkpoints=FileSystemArtifactStore(str(artifacts)), on_evaluation=database_deleted_after_the_first_checkpoint)
    keeping = keeping_best_model(study) if keeping_best else contextlib.nullcontext()
    with keeping, pytest.raises(Exception) as raised:  # Optuna masks the storage's error (see storage_failure_in)
        study.optimize(objective, n_trials=1)
    assert storage_failure_in(raised.value) is not None
    assert list(scratch_root.glob("hpo-trial-*")) == []
    assert any(p.is_file() and p.stat().st_size > 0 for p in artifacts.iterdir())  # the checkpoint its retry resumes from


def test_a_sqlite_path_that_is_no_database_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    """SQLite's own "file is not a database" named no fix; a directory was "unable to open database file"."""
    from hpo import StorageError
    from hpo.storage._storage import check_storage_url

    text = tmp_path / "notes.db"
    text.write_text("not a database")
    with pytest.raises(StorageError, match=rf"^{text} is not an SQLite database \(its first bytes are b'not a da'\); pass the database file"):
        create_storage(f"sqlite:///{text}")
    assert text.read_text() == "not a database"
    with pytest.raises(StorageError, match=rf"^SQLite path {tmp_path} is a directory; give a file in it, e.g. sqlite:///{tmp_path}/hpo-studies.db$"):
        check_storage_url(f"sqlite:///{tmp_path}")
    (tmp_path / "empty.db").touch()  # SQLite makes a database of an empty file
    check_storage_url(f"sqlite:///{tmp_path / 'empty.db'}")


def test_create_storage_given_no_url_string_is_one_line(tmp_path: Path) -> None:
    """hpo.create_storage(Path(...)) was an AttributeError ('PosixPath' object has no attribute 'lower'), None another."""
    for given in (tmp_path / "s.db", None):
        with pytest.raises(StorageError, match=rf"^storage must be a database URL \(a str\), got {re.escape(repr(given))}; "
                                               r"pass e\.g\. 'sqlite:///hpo-studies\.db'$"):
            create_storage(given)  # type: ignore[arg-type]
    assert not (tmp_path / "s.db").exists()
