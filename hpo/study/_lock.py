"""The study's lock: serialises a worker's check-then-write against the other workers of the same study."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import optuna
import sqlalchemy

from hpo.storage._sqlite_lock import sqlite_file_lock


@contextlib.contextmanager
def study_lock(storage: optuna.storages.BaseStorage, study_name: str) -> Iterator[bool]:
    """Serialise a check-then-write (an enqueue, a slot of the budget) across workers of the same study; yields whether
    it does. ``enqueue_trial(skip_if_exists=True)`` alone can enqueue twice when two processes check before either writes.

    PostgreSQL: a transaction-scoped advisory lock (released even if the worker dies); SQLite: a lock on the
    database file. No lock reaches through a ``grpc://`` proxy (Optuna's proxy serves storage calls only), nor
    is one needed in memory, where the study lives in one process: these yield ``False``.
    """
    engine = getattr(storage, "engine", None)
    if not isinstance(engine, sqlalchemy.Engine):
        yield False
        return
    key = int.from_bytes(hashlib.sha256(f"hpo-baseline:{study_name}".encode()).digest()[:8], "big", signed=True)
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
            yield True
        return
    with sqlite_file_lock(engine.url.database if engine.dialect.name == "sqlite" else None):
        yield True
