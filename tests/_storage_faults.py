"""Real faults in a real storage, for the storage tests: a connection dropped around a COMMIT, fresh databases, snapshots."""

from __future__ import annotations

import contextlib
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import psycopg2
import pytest
import sqlalchemy
from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
from sqlalchemy import event, orm

from hpo import create_storage

if TYPE_CHECKING:
    from hpo.storage._retrying_storage import RetryingStorage

_WRITES = ("INSERT", "UPDATE", "DELETE")


def fresh_storage_factory(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], tuple[RetryingStorage, str]]:
    """A function making an empty storage through ``create_storage`` and returning it with its URL.

    SQLite: a copy of an empty database made once per test, as Optuna's CREATE TABLEs are what
    takes time there. PostgreSQL: one schema per storage in the test session's database,
    cheaper than a database each.
    """
    template = tmp_path / "empty.db"

    def sqlite() -> tuple[RetryingStorage, str]:
        if not template.exists():
            create_storage(f"sqlite:///{template}").engine.dispose()
        path = tmp_path / f"{uuid.uuid4().hex[:8]}.db"
        shutil.copyfile(template, path)
        return create_storage(f"sqlite:///{path}"), f"sqlite:///{path}"  # type: ignore[return-value]

    if backend == "sqlite":
        return sqlite
    server_url = request.getfixturevalue("pg_server")

    def postgres() -> tuple[RetryingStorage, str]:
        schema = f"s_{uuid.uuid4().hex[:10]}"
        with contextlib.closing(psycopg2.connect(server_url.replace("postgresql://", "postgres://"))) as admin:
            admin.autocommit = True
            with admin.cursor() as cursor:
                cursor.execute(f'CREATE SCHEMA "{schema}"')
        url = f"{server_url}?options=-csearch_path%3D{schema}"
        return create_storage(url), url  # type: ignore[return-value]

    return postgres


@contextlib.contextmanager
def dropped_connection(storage: RetryingStorage, *, after_commit: bool = True, times: int = 1) -> Iterator[list[int]]:
    """The next ``times`` transactions of ``storage`` that write lose their connection at COMMIT.

    ``after_commit``: the COMMIT goes through and the connection drops before its reply
    reaches the client (an OperationalError with the connection invalidated, raised from
    SQLAlchemy's session ``after_commit`` hook); otherwise it drops just before the COMMIT is
    sent (the engine's ``commit`` hook) and the transaction rolls back. Yields ``[faults left]``.
    """
    engine = storage.engine
    left = [times]
    wrote = threading.local()

    def before_cursor_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith(_WRITES):
            wrote.flag = True

    def drop(session_or_connection: Any) -> None:
        bind = session_or_connection.bind if after_commit else session_or_connection.engine
        if bind is engine and getattr(wrote, "flag", False) and left[0] > 0:
            left[0] -= 1
            wrote.flag = False
            where = "after COMMIT" if after_commit else "before COMMIT"
            raise sqlalchemy.exc.OperationalError(
                "COMMIT", None, ConnectionResetError(f"connection dropped {where} (injected)"), connection_invalidated=True
            )

    def clear(session: orm.Session) -> None:
        wrote.flag = False

    target, hook = (orm.Session, "after_commit") if after_commit else (engine, "commit")
    event.listen(engine, "before_cursor_execute", before_cursor_execute)
    event.listen(target, hook, drop)
    event.listen(orm.Session, "after_rollback", clear)
    try:
        yield left
    finally:
        event.remove(orm.Session, "after_rollback", clear)
        event.remove(target, hook, drop)
        event.remove(engine, "before_cursor_execute", before_cursor_execute)


def snapshot(url: str) -> tuple[list[Any], int]:
    """Every study and trial in the database at ``url`` as plain data, read afresh (no cache), and the heartbeat rows.

    Ids and the names RDBStorage makes up for unnamed studies are left out: they differ
    between two databases even when their contents agree.
    """
    storage = optuna.storages.RDBStorage(url)
    try:
        studies = []
        for study in sorted(storage.get_all_studies(), key=lambda s: s.study_name):
            name = "<unnamed>" if study.study_name.startswith(DEFAULT_STUDY_NAME_PREFIX) else study.study_name
            trials = [
                (t.number, t.state, t.values, t.params, t.user_attrs, t.system_attrs, t.intermediate_values)
                for t in storage.get_all_trials(study._study_id)
            ]
            studies.append((name, study.directions, study.user_attrs, study.system_attrs, trials))
        with storage.engine.connect() as connection:
            heartbeats = connection.execute(sqlalchemy.text("SELECT count(*) FROM trial_heartbeats")).scalar_one()
        return studies, heartbeats
    finally:
        storage.engine.dispose()
