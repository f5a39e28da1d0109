"""Write tokens: how a retried storage write tells that its own earlier attempt committed.

A write the wrapper retries carries a fresh token. While it runs, a SQLAlchemy ``after_flush``
hook on the storage's sessions adds a row ``(token, id)`` to a table of ours,
``hpo_write_tokens``, for the study or trial that write inserts or changes, in the same
transaction as the write itself: the token row exists if and only if the write committed.

- A retry first looks its token up: found, the earlier attempt committed and the retry returns
  what that attempt would have returned, without writing again.
- Creating the same study or trial twice with one token violates the token's primary key: a
  second insert (such as the one ``RDBStorage._create_new_trial`` makes when it re-runs its
  transaction after a COMMIT whose reply was lost) fails with ``IntegrityError`` instead of
  leaving an orphan behind.

The tokens live in their own table, so trials and studies read exactly as they would without
them (Optuna's storage contract: a new trial has no system attributes).

Optuna internals relied on here, each pinned by ``tests/hpo/storage/test_optuna_internals.py``:
``RDBStorage.scoped_session`` (the sessions its writes run in) and the ORM classes
``optuna.storages._rdb.models.StudyModel`` and ``TrialModel`` (which rows a flush writes).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from sqlalchemy import orm

_logger = logging.getLogger("hpo.storage")
TABLE_NAME = "hpo_write_tokens"
_metadata = sqlalchemy.MetaData()
_tokens = sqlalchemy.Table(
    TABLE_NAME,
    _metadata,
    sqlalchemy.Column("token", sqlalchemy.String(32), primary_key=True),
    sqlalchemy.Column("row_id", sqlalchemy.Integer, nullable=False),
)


class WriteTokens:
    """The token table of one :class:`RDBStorage`, and the hook that stamps its writes."""

    def __init__(self, storage: RDBStorage, is_lost_connection: Callable[[BaseException], bool]) -> None:
        self._engine = storage.engine
        self._is_lost_connection = is_lost_connection
        self._pending = threading.local()
        # Made at the first stamped write, not on open: read-only commands (status, best, export)
        # must leave the database exactly as they found it.
        self._enabled: bool | None = None
        self._creating = threading.Lock()
        sqlalchemy.event.listen(storage.scoped_session, "after_flush", self._stamp)

    def _ensure_table(self) -> bool:
        with self._creating:
            if self._enabled is None:
                self._enabled = self._create_table()
        return self._enabled

    def _create_table(self) -> bool:
        # Twice: workers starting together race to CREATE it, and the loser's second check finds it.
        for attempt in (1, 2):
            try:
                _metadata.create_all(self._engine)  # no-op when the table exists
                return True
            except sqlalchemy.exc.SQLAlchemyError as err:
                if self._is_lost_connection(err):
                    raise  # the caller's retry makes it again; only a database refusing it goes without
                if attempt == 2:  # a read-only database: the write itself will fail
                    _logger.warning("no table %s (%s); storage writes will not be retried safely", TABLE_NAME, str(err).splitlines()[0])
        return False

    @staticmethod
    def new() -> str:
        return uuid.uuid4().hex

    @contextlib.contextmanager
    def stamping(self, token: str | None) -> Iterator[None]:
        """Writes flushed by this thread meanwhile record ``token``."""
        self._pending.token = token if token is not None and self._ensure_table() else None
        try:
            yield
        finally:
            self._pending.token = None

    def find(self, token: str) -> int | None:
        """The study or trial id that the write stamped with ``token`` committed, or None."""
        if not self._enabled:
            return None
        with self._engine.connect() as connection:
            return connection.execute(sqlalchemy.select(_tokens.c.row_id).where(_tokens.c.token == token)).scalar()

    def _stamp(self, session: orm.Session, flush_context: Any) -> None:
        token = getattr(self._pending, "token", None)
        if token is None:
            return
        for row in session.new:
            if isinstance(row, models.TrialModel):
                session.execute(_tokens.insert().values(token=token, row_id=row.trial_id))
            elif isinstance(row, models.StudyModel):
                session.execute(_tokens.insert().values(token=token, row_id=row.study_id))
        for row in session.dirty:
            if isinstance(row, models.TrialModel) and row not in session.new and session.is_modified(row):
                # A state change can be flushed more than once in its transaction: stamp it once.
                absent = ~sqlalchemy.exists().where(_tokens.c.token == token)
                select = sqlalchemy.select(sqlalchemy.literal(token), sqlalchemy.literal(row.trial_id)).where(absent)
                session.execute(_tokens.insert().from_select(["token", "row_id"], select))
