"""What a database error means to a storage: a lost connection, a collision while opening, a refused duplicate.

One place for the rules by which :class:`~hpo.storage._retrying_storage.RetryingStorage` and
opening a storage (:func:`~hpo.storage._storage.create_storage`) decide to retry or to fail.
"""

from __future__ import annotations

import sqlite3

import optuna
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError, PendingRollbackError

from trial_executor._failures import error_chain

# PostgreSQL SQLSTATEs of a lost or refused connection, a server shutting down, too many
# connections, and a transaction rolled back by a serialization failure or a deadlock.
_PG_TRANSIENT = ("08", "57P", "53300", "40001", "40P01")
_SQLITE_TRANSIENT = ("database is locked", "database table is locked")
# What a PostgreSQL server says when it refuses a connection for good (the client gets no SQLSTATE then).
_PG_REFUSED = ("does not exist", "password authentication failed", "no pg_hba.conf entry")


class StorageFailedError(Exception):
    """The storage cannot be used and waiting will not help (a SQLite file deleted, a read-only database, or a
    connection lost for longer than the retry bound): never retried again, wherever it is caught."""


def _sqlstate(err: DBAPIError) -> str | None:
    """The PostgreSQL SQLSTATE of ``err`` (psycopg2's ``pgcode``, psycopg's ``sqlstate``), if any."""
    code = getattr(err.orig, "pgcode", None) or getattr(err.orig, "sqlstate", None)
    return str(code) if code else None


def _dbapi_error_is_transient(err: DBAPIError) -> bool:
    if err.connection_invalidated:
        return True
    if isinstance(err.orig, sqlite3.Error):
        return any(text in str(err.orig) for text in _SQLITE_TRANSIENT)
    sqlstate = _sqlstate(err)
    if sqlstate:
        return sqlstate.startswith(_PG_TRANSIENT)
    if any(text in str(err.orig) for text in _PG_REFUSED):
        return False  # the server answered and refused (no such database or role, bad password): no retry outlasts it
    return isinstance(err, (OperationalError, InterfaceError))  # no SQLSTATE: the client lost the server


def is_lost_connection(err: BaseException) -> bool:
    """Whether ``err`` comes from a lost database connection, which a retry can outlast.

    RDBStorage re-raises SQLAlchemy errors as StorageInternalError, and a query it retries in
    the same session after a dropped connection fails with PendingRollbackError, the dropped
    connection being that error's context; the first database error in the chain decides.
    """
    pending_rollback = False
    for link in error_chain(err):
        if isinstance(link, StorageFailedError):  # given up on already: a lost connection behind it is not waited for again
            return False
        if isinstance(link, DBAPIError):
            return _dbapi_error_is_transient(link)
        pending_rollback = pending_rollback or isinstance(link, PendingRollbackError)
    return pending_rollback


# PostgreSQL's word for two sessions creating one of Optuna's tables, enum types or version rows at
# once: unique_violation (its catalog's own unique index, or a version row), duplicate_table, duplicate_object.
_PG_CREATION_COLLISION = ("23505", "42P07", "42710")


def is_creation_collision(err: BaseException) -> bool:
    """Whether opening a storage collided with another worker creating Optuna's schema at the same time.

    The table-creation lock is a session lock, so it ends with its holder's connection (a kill, a
    restart) while that worker's CREATE TABLEs may still run on another; the next worker then creates
    too, and one of the two is refused. Its transaction is rolled back, and a retry finds the schema
    made (or takes the lock once the other is done).
    """
    for link in error_chain(err):
        if isinstance(link, StorageFailedError):  # given up on already, as for a lost connection
            return False
        if isinstance(link, DBAPIError):
            return _sqlstate(link) in _PG_CREATION_COLLISION
    return False


def sqlite_error_in(err: BaseException) -> sqlite3.Error | None:
    """The SQLite error behind ``err``, if any."""
    return next((link.orig for link in error_chain(err) if isinstance(link, DBAPIError) and isinstance(link.orig, sqlite3.Error)), None)


def committed_row_conflict(err: BaseException) -> bool:
    """An insert refused as a duplicate: maybe the token of an attempt that committed."""
    return isinstance(err, optuna.exceptions.DuplicatedStudyError) or any(isinstance(link, IntegrityError) for link in error_chain(err))
