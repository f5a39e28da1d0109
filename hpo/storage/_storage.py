"""The one storage factory: Optuna RDB storage on SQLite (embedded default) or PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import re
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import optuna
import sqlalchemy
from optuna.storages._rdb import models as optuna_models
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from hpo._errors import UserError
from hpo.storage._backoff import Backoff, outage_waited, retry_lost_connection
from hpo.storage._bulk_reads import BulkReadingRDBStorage
from hpo.storage._db_errors import StorageFailedError, is_creation_collision, is_lost_connection
from hpo.storage._retry_policy import RetryByTrialPolicy
from hpo.storage._retrying_storage import RetryingStorage
from hpo.storage._sqlite_lock import sqlite_file_lock
from hpo.storage._url_secrets import mask_secrets, mask_url, split_credentials

if TYPE_CHECKING:
    from hpo.storage._proxy_client import ProxyStorage

DEFAULT_SQLITE_FILE = "hpo-studies.db"
STORAGE_ENV = "HPO_STORAGE"
_POSTGRES_DRIVERS = ("postgresql", "postgresql+psycopg2", "postgresql+psycopg")
# Any fixed 64-bit number works; it only has to be the same in every worker.
_TABLE_CREATION_LOCK_ID = 0x68706F5F7461626C
_LOCK_POLL_SECONDS = 0.2
GRPC_SCHEME = "grpc://"
_GRPC_CONNECT_TIMEOUT = 10.0
_GRPC_RESTART_POLL = 2.0


@dataclass(frozen=True)
class Heartbeat:
    """Heartbeat settings: a trial silent for ``grace_period`` seconds is failed and retried.

    Defaults suit trials of minutes: a beat every 30 s, stale after 2 min, 3 retries (``max_retry``: for a trial
    whose worker recorded no limit of its own, see :class:`RetryByTrialPolicy`).
    """

    interval: int = 30
    grace_period: int = 120
    max_retry: int = 3

    def storage_kwargs(self) -> dict[str, Any]:
        callback = RetryByTrialPolicy(self.max_retry)  # a trial that recorded its own retry policy keeps it
        return {"heartbeat_interval": self.interval, "grace_period": self.grace_period, "heartbeat_stale_trial_callback": callback}


class StorageError(UserError):
    """The storage URL is malformed, unsupported or unreachable."""


def _require_str(url: object, alternative: str = "") -> None:
    if not isinstance(url, str):  # from Python: one line, not an AttributeError deep in the factory
        raise StorageError(f"storage must be a database URL (a str){' ' * bool(alternative)}{alternative}, got {url!r}; "
                           f"pass e.g. 'sqlite:///{DEFAULT_SQLITE_FILE}'")


def resolve_storage_url(url: str | None) -> str:
    """``--storage`` if given, else ``$HPO_STORAGE``, else a SQLite file in the working directory."""
    if url is not None:
        _require_str(url, "or None")
    if url is not None and not url.strip():  # not "no storage": '' read $HPO_STORAGE, a study elsewhere than asked
        raise StorageError(f"storage URL is empty; give one such as sqlite:///{DEFAULT_SQLITE_FILE}, or None for ${STORAGE_ENV} or that file")
    return url or os.environ.get(STORAGE_ENV) or f"sqlite:///{DEFAULT_SQLITE_FILE}"


def check_password_is_encoded(url: str, what: str = "storage URL") -> None:
    """Refuse a password with a raw ``@``, ``/``, ``?`` or ``#``: a URL parser splits it there (and an error quoting
    what it took for the host shows the rest of the password). ``what`` names the URL in the message."""
    parts = split_credentials(url)
    if parts and parts[2] and any(char in parts[2] for char in "@/?#"):
        raise StorageError(
            f"{what} {mask_url(url)!r}: the password contains a character that URLs reserve (@ / ? #); "
            "percent-encode it, and any @ in a query value (@ as %40, / as %2F, ? as %3F, # as %23), e.g. with "
            "python -c \"import urllib.parse; print(urllib.parse.quote('PASSWORD', safe=''))\""
        )


def _parse(url: str) -> URL:
    check_password_is_encoded(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise StorageError(
            f"storage URL {mask_url(url)!r} is malformed; use sqlite:///path.db or postgresql://user:password@host:5432/db"
        ) from None
    if parsed.drivername not in ("sqlite", *_POSTGRES_DRIVERS):
        raise StorageError(
            f"storage URL scheme {parsed.drivername!r} is not supported; use sqlite:///path.db or postgresql://user:password@host:5432/db"
        )
    return parsed


def _explain_connection_error(url: URL, error: Exception) -> str:
    where = f"PostgreSQL at {url.host or 'localhost'}:{url.port or 5432}"
    text = str(getattr(error, "orig", error) or error)
    if "password authentication failed" in text or "no password supplied" in text:
        return f"password authentication failed for user {url.username!r} on {where}; check the password in the storage URL"
    missing = re.search(r'database "(.*)" does not exist', text)
    if missing:  # the server's name for it: a URL without one gets libpq's default, the user's name
        return (
            f"database {missing.group(1)!r} does not exist on {where}; create it with "
            f"`createdb -h {url.host or 'localhost'} -p {url.port or 5432} -U {url.username or 'postgres'} {missing.group(1)}`"
        )
    if "Connection refused" in text or "could not connect" in text or "timeout expired" in text:
        return f"cannot reach {where} (is the server running?); start it or fix --storage / ${STORAGE_ENV}"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if "resolve host" in text or "translate host name" in text:
        named = re.search(r"""(?:resolve host|translate host name) ["']([^"']*)["']""", text)  # a ?host= in the query wins over the URL's
        host = named.group(1) if named else url.host
        return f"cannot resolve the host {host!r} of the storage URL ({first}); fix the host in --storage / ${STORAGE_ENV}"
    return f"cannot connect to {where}: {first}; check --storage / ${STORAGE_ENV}"


@contextlib.contextmanager
def _table_creation_lock(url: URL, engine: sqlalchemy.Engine | None) -> Iterator[bool]:
    """Serialise Optuna's CREATE TABLE across workers starting at once on a fresh database.

    Yields whether the tables are still to be made. PostgreSQL: the lock is polled, not queued
    for, and a worker finding the tables made takes none: a worker waiting in a queue holds a
    connection that a restart or a connection kill ends (and its retry queues anew). The lock ends
    with its connection too, possibly while its holder still creates on another: the collision
    that may follow is retried (:func:`create_storage`).
    """
    if engine is None:
        with sqlite_file_lock(url.database):
            yield True
        return
    connection = _creation_turn(engine)
    if connection is None:
        yield False
        return
    with connection:
        try:
            yield True
        finally:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:id)"), {"id": _TABLE_CREATION_LOCK_ID})


def _creation_turn(engine: sqlalchemy.Engine) -> sqlalchemy.Connection | None:
    """A connection holding the table-creation lock, or ``None`` once Optuna's schema is ready."""
    while not _optuna_schema_ready(engine):
        connection = engine.connect()
        try:
            if connection.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:id)"), {"id": _TABLE_CREATION_LOCK_ID}).scalar():
                return connection
        except BaseException:
            connection.close()
            raise
        connection.close()
        time.sleep(_LOCK_POLL_SECONDS)
    return None


def _optuna_schema_ready(engine: sqlalchemy.Engine) -> bool:
    """Optuna's tables exist and its schema version is stamped (the last step of its first open), so nothing is left to make."""
    with engine.connect() as connection:
        if not {*optuna_models.BaseModel.metadata.tables, "alembic_version"} <= set(sqlalchemy.inspect(connection).get_table_names()):
            return False
        return connection.execute(sqlalchemy.text("SELECT count(*) FROM alembic_version")).scalar_one() > 0


def _parse_grpc(url: str) -> tuple[str, int]:
    """``grpc://host:port`` (a ``python -m hpo.proxy`` storage proxy) as ``(host, port)``."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
        extra = parts.path.strip("/") or parts.query or parts.username
    except ValueError:
        host, port, extra = None, None, "bad port"
    if not host or not port or extra:
        raise StorageError(
            f"gRPC storage URL {mask_url(url)!r} is malformed; use grpc://host:port, e.g. grpc://127.0.0.1:13000 "
            "(the address `python -m hpo.proxy` prints)"
        )
    return (f"[{host}]" if ":" in host else host), port


def check_storage_url(url: str, *, wait_for_server: bool = False) -> None:
    """Fail fast, before anything is written, on a malformed URL or an unreachable database.

    A server that answers but drops the connection (restarting, terminating connections) is
    waited for with the storage's bounded backoff; one that refuses it (nothing listening)
    fails at once, unless ``wait_for_server``: a worker whose parent reached the database
    knows the URL is right, so a refusal there is a restart. A ``url`` that is no str (a ``Path``, ``None``: see
    :func:`resolve_storage_url`) is a :class:`StorageError` too.
    """
    _require_str(url)
    if url.lower().startswith(GRPC_SCHEME):
        _check_proxy(*_parse_grpc(url), wait_for_server=wait_for_server)
        return
    parsed = _parse(url)
    if parsed.drivername == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            # Each process would get its own empty database, gone when it ends: no study to resume, share or browse.
            raise StorageError(f"storage {mask_url(url)!r} is an in-memory SQLite database, lost when the run ends; "
                               "give a file, e.g. sqlite:///hpo-studies.db")
        _check_sqlite_file(Path(parsed.database).expanduser())
        return
    engine = sqlalchemy.create_engine(parsed, connect_args={"connect_timeout": 10}, poolclass=sqlalchemy.pool.NullPool)

    def connect() -> None:
        with engine.connect():
            pass

    try:
        retry_lost_connection("opening the storage", connect, lost=is_lost_connection if wait_for_server else _server_answered)
    except SQLAlchemyError as err:
        raise StorageError(mask_secrets(_explain_connection_error(parsed, err), url)) from None
    finally:
        engine.dispose()


_SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def _check_sqlite_file(path: Path) -> None:
    """A new file's directory must exist; an existing file must be a database (an empty one SQLite makes one of)."""
    parent = path.resolve().parent
    if not parent.is_dir():
        raise StorageError(f"SQLite directory {parent} does not exist; create it or choose another path")
    if path.is_dir():
        raise StorageError(f"SQLite path {path} is a directory; give a file in it, e.g. sqlite:///{path / 'hpo-studies.db'}")
    try:
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_HEADER))
    except OSError:  # missing (created on first use) or unreadable (SQLite's own error says which)
        return
    if head and head != _SQLITE_HEADER:
        raise StorageError(f"{path} is not an SQLite database (its first bytes are {head[:8]!r}); pass the database file the "
                           "study was run with, or a new file name")


def _check_proxy(host: str, port: int, *, wait_for_server: bool) -> None:
    """The storage proxy at ``host:port`` answers; with ``wait_for_server``, waited for on the backoff schedule (a restart)."""
    backoff = Backoff(f"opening the storage proxy at {host}:{port}")
    proxy = optuna.storages.GrpcStorageProxy(host=host, port=port)
    try:
        while True:
            try:
                # Short waits while waiting out a restart, so that a stop request is seen between them.
                proxy.wait_server_ready(timeout=_GRPC_RESTART_POLL if wait_for_server else _GRPC_CONNECT_TIMEOUT)
                return
            except ConnectionError as err:
                if not wait_for_server:  # a first contact: the URL is the likely fault
                    raise StorageError(
                        f"cannot reach the storage proxy at {host}:{port} (is `python -m hpo.proxy` running there?); "
                        f"start it or fix --storage / ${STORAGE_ENV}"
                    ) from None
                if not backoff.wait(err, happened="found it not answering", why="a restart, since the run's first process reached it"):
                    raise StorageFailedError(
                        f"storage proxy {host}:{port} unreachable {outage_waited()} (opening the storage); bring the proxy "
                        "(python -m hpo.proxy) back, then rerun the same command to resume"
                    ) from None
    finally:
        proxy.close()


# What a server that is up says while it restarts, fails over or drops connections; refused
# or unknown-host errors mean nothing answered, which at first contact is a wrong URL.
_SERVER_BUSY = (
    "the database system is starting up", "the database system is shutting down", "the database system is in recovery mode",
    "terminating connection", "server closed the connection unexpectedly", "too many clients", "remaining connection slots",
)


def _server_answered(err: BaseException) -> bool:
    """A lost connection from a server that answered (see ``_SERVER_BUSY``): worth waiting for even at first contact."""
    return is_lost_connection(err) and any(text in str(err) for text in _SERVER_BUSY)


def create_storage(
    url: str, *, heartbeat: Heartbeat | None = None, wait_for_server: bool = False
) -> RetryingStorage | ProxyStorage:
    """Open (and on first use create) Optuna's RDB storage at ``url``.

    Connections are checked before use (``pool_pre_ping``) and calls that lose their
    connection are retried with backoff, writes without ever applying twice
    (:class:`~hpo.storage._retrying_storage.RetryingStorage`, Optuna's cached RDB storage wrapped), so
    a database restart does not break a long-running worker. With ``heartbeat``, running trials record
    heartbeats and a trial whose worker died is failed and re-queued (WAITING) by the next
    worker that starts a trial. ``grpc://host:port`` connects to a storage proxy
    (``python -m hpo.proxy``) instead, which holds the database connections; heartbeats need
    the database itself and are not available through it. Its calls have a deadline and wait
    out a proxy restart where repeating them is safe (:class:`~hpo.storage._proxy_client.ProxyStorage`).

    Opening (the table-creation lock, Optuna's CREATE TABLEs and its first reads) waits out a
    lost connection, or a collision with another worker's table creation
    (:func:`~hpo.storage._db_errors.is_creation_collision`), with the same bounded backoff as
    every call (:func:`~hpo.storage._backoff.retry_lost_connection`); a database still down
    after the bound is one :class:`StorageError`. ``wait_for_server``: see :func:`check_storage_url`.
    """
    check_storage_url(url, wait_for_server=wait_for_server)
    if url.lower().startswith(GRPC_SCHEME):
        from hpo.storage._proxy_client import ProxyStorage  # gRPC loaded for grpc:// workers only

        host, port = _parse_grpc(url)
        return ProxyStorage(host=host, port=port)
    parsed = _parse(url)
    lock_engine = None
    if parsed.drivername != "sqlite":
        lock_engine = sqlalchemy.create_engine(parsed, poolclass=sqlalchemy.pool.NullPool, connect_args={"connect_timeout": 10})
    try:
        return retry_lost_connection(
            "opening the storage", lambda: _open_rdb(url, parsed, lock_engine, heartbeat),
            lost=lambda err: is_lost_connection(err) or is_creation_collision(err),
        )
    except (SQLAlchemyError, optuna.exceptions.StorageInternalError) as err:
        lost = " (lost its database connection until the retry bound)" if is_lost_connection(err) else ""
        raise StorageError(mask_secrets(f"storage {mask_url(url)} failed{lost}: {_first_line(err)}", url)) from None
    finally:
        if lock_engine is not None:
            lock_engine.dispose()


def _first_line(err: BaseException) -> str:
    cause = next((link for link in (err, err.__cause__, err.__context__) if link is not None and str(link).strip()), err)
    return str(cause).strip().splitlines()[0] if str(cause).strip() else type(err).__name__


def _open_rdb(url: str, parsed: URL, lock_engine: sqlalchemy.Engine | None, heartbeat: Heartbeat | None) -> RetryingStorage:
    """One attempt at opening; a retry makes a fresh RDBStorage (a half-made one holds a broken pool)."""
    engine_kwargs: dict[str, object] = {"pool_pre_ping": True}
    if parsed.drivername != "sqlite":
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    with _table_creation_lock(parsed, lock_engine) as to_make, warnings.catch_warnings():
        # Heartbeats are "experimental" in Optuna 5; they are what stale-trial recovery needs.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        kwargs: dict[str, Any] = heartbeat.storage_kwargs() if heartbeat else {}
        rdb = BulkReadingRDBStorage(url, engine_kwargs=engine_kwargs, skip_table_creation=not to_make, **kwargs)
    return RetryingStorage(rdb)
