"""The one storage factory: Optuna RDB storage on SQLite (embedded default) or PostgreSQL."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import optuna
import sqlalchemy
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from hpo._errors import UserError
from hpo.storage._retrying_storage import RetryingStorage

DEFAULT_SQLITE_FILE = "hpo-studies.db"
STORAGE_ENV = "HPO_STORAGE"
_POSTGRES_DRIVERS = ("postgresql", "postgresql+psycopg2", "postgresql+psycopg")
# Any fixed 64-bit number works; it only has to be the same in every worker.
_TABLE_CREATION_LOCK_ID = 0x68706F5F7461626C
GRPC_SCHEME = "grpc://"
_GRPC_CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Heartbeat:
    """Heartbeat settings: a trial silent for ``grace_period`` seconds is failed and retried.

    Defaults suit trials of minutes: a beat every 30 s, stale after 2 min, 3 retries.
    """

    interval: int = 30
    grace_period: int = 120
    max_retry: int = 3

    def storage_kwargs(self) -> dict[str, Any]:
        callback = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=self.max_retry)
        return {"heartbeat_interval": self.interval, "grace_period": self.grace_period, "heartbeat_stale_trial_callback": callback}


class StorageError(UserError):
    """The storage URL is malformed, unsupported or unreachable."""


def resolve_storage_url(url: str | None) -> str:
    """``--storage`` if given, else ``$HPO_STORAGE``, else a SQLite file in the working directory."""
    return url or os.environ.get(STORAGE_ENV) or f"sqlite:///{DEFAULT_SQLITE_FILE}"


def _split_credentials(url: str) -> tuple[str, str, str | None, str] | None:
    """``(scheme, user, password as typed, rest)`` of ``scheme://user:password@rest``; ``None`` without credentials.

    Taken from the raw text, not from a URL parser: a password with a raw ``@``, ``/`` or
    ``?`` must be masked whole however a parser would split it, so the userinfo runs up to
    the *last* ``@``.
    """
    scheme, separator, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not separator or not at:
        return None
    user, colon, password = userinfo.partition(":")
    return scheme, user, (password if colon else None), host


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, safe to print and log, however malformed ``url`` is."""
    parts = _split_credentials(url)
    if parts is None or not parts[2]:
        return url
    scheme, user, _, host = parts
    return f"{scheme}://{user}:***@{host}"


def mask_secrets(text: str, url: str) -> str:
    """``text`` with the password of ``url`` (and the raw URL) masked wherever it appears, as typed or decoded."""
    text = text.replace(url, mask_url(url))
    parts = _split_credentials(url)
    password = parts[2] if parts else None
    if password:
        for form in sorted({password, unquote(password)}, key=len, reverse=True):
            text = text.replace(form, "***")
    return text


def _check_password_is_encoded(url: str) -> None:
    """Refuse a password with a raw ``@``, ``/``, ``?`` or ``#``: a URL parser splits it there."""
    parts = _split_credentials(url)
    if parts and parts[2] and any(char in parts[2] for char in "@/?#"):
        raise StorageError(
            f"storage URL {mask_url(url)!r}: the password contains a character that URLs reserve (@ / ? #); "
            "percent-encode it (@ as %40, / as %2F, ? as %3F, # as %23), e.g. with "
            "python -c \"import urllib.parse; print(urllib.parse.quote('PASSWORD', safe=''))\""
        )


def _parse(url: str) -> URL:
    _check_password_is_encoded(url)
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
    if re.search(r'database ".*" does not exist', text):
        return (
            f"database {url.database!r} does not exist on {where}; create it with "
            f"`createdb -h {url.host or 'localhost'} -p {url.port or 5432} -U {url.username or 'postgres'} {url.database}`"
        )
    if "Connection refused" in text or "could not connect" in text or "timeout expired" in text:
        return f"cannot reach {where} (is the server running?); start it or fix --storage / ${STORAGE_ENV}"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"cannot connect to {where}: {first}"


@contextlib.contextmanager
def _table_creation_lock(url: URL, engine: sqlalchemy.Engine | None) -> Iterator[None]:
    """Serialise Optuna's CREATE TABLE across workers starting at once on a fresh database."""
    if engine is not None:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:id)"), {"id": _TABLE_CREATION_LOCK_ID})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:id)"), {"id": _TABLE_CREATION_LOCK_ID})
        return
    with sqlite_file_lock(url.database):
        yield


@contextlib.contextmanager
def sqlite_file_lock(database: str | None) -> Iterator[None]:
    """An exclusive lock among this machine's processes on the SQLite file ``database`` (none for ``:memory:``).

    The lock file lives in the temp directory, named by the database's absolute path: not
    beside the database (read-only commands leave nothing there), and not the database
    itself (closing another descriptor of it would drop SQLite's own POSIX locks).
    """
    if not database or database == ":memory:":
        yield
        return
    key = hashlib.sha256(str(Path(database).expanduser().resolve()).encode()).hexdigest()[:24]
    # Per user: a directory another user created in the shared temp directory is not ours to write.
    lock_dir = Path(tempfile.gettempdir()) / f"precision-hpo-locks-{os.getuid()}"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    with (lock_dir / f"{key}.lock").open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


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


def check_storage_url(url: str) -> None:
    """Fail fast, before anything is written, on a malformed URL or an unreachable database."""
    if url.lower().startswith(GRPC_SCHEME):
        host, port = _parse_grpc(url)
        proxy = optuna.storages.GrpcStorageProxy(host=host, port=port)
        try:
            proxy.wait_server_ready(timeout=_GRPC_CONNECT_TIMEOUT)
        except ConnectionError:
            raise StorageError(
                f"cannot reach the storage proxy at {host}:{port} (is `python -m hpo.proxy` running there?); "
                f"start it or fix --storage / ${STORAGE_ENV}"
            ) from None
        finally:
            proxy.close()
        return
    parsed = _parse(url)
    if parsed.drivername == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            parent = Path(parsed.database).expanduser().resolve().parent
            if not parent.is_dir():
                raise StorageError(f"SQLite directory {parent} does not exist; create it or choose another path")
        return
    engine = sqlalchemy.create_engine(parsed, connect_args={"connect_timeout": 10}, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as err:
        raise StorageError(mask_secrets(_explain_connection_error(parsed, err), url)) from None
    finally:
        engine.dispose()


def create_storage(
    url: str, *, heartbeat: Heartbeat | None = None
) -> RetryingStorage | optuna.storages.GrpcStorageProxy:
    """Open (and on first use create) Optuna's RDB storage at ``url``.

    Connections are checked before use (``pool_pre_ping``) and calls that lose their
    connection are retried with backoff, writes without ever applying twice
    (:class:`~hpo.storage._retrying_storage.RetryingStorage`, Optuna's cached RDB storage wrapped), so
    a database restart does not break a long-running worker. With ``heartbeat``, running trials record
    heartbeats and a trial whose worker died is failed and re-queued (WAITING) by the next
    worker that starts a trial. ``grpc://host:port`` connects to a storage proxy
    (``python -m hpo.proxy``) instead, which holds the database connections; heartbeats need
    the database itself and are not available through it.
    """
    check_storage_url(url)
    if url.lower().startswith(GRPC_SCHEME):
        host, port = _parse_grpc(url)
        return optuna.storages.GrpcStorageProxy(host=host, port=port)
    parsed = _parse(url)
    engine_kwargs: dict[str, object] = {"pool_pre_ping": True}
    lock_engine = None
    if parsed.drivername != "sqlite":
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
        lock_engine = sqlalchemy.create_engine(parsed, poolclass=sqlalchemy.pool.NullPool, connect_args={"connect_timeout": 10})
    try:
        with _table_creation_lock(parsed, lock_engine), warnings.catch_warnings():
            # Heartbeats are "experimental" in Optuna 5; they are what stale-trial recovery needs.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            kwargs = heartbeat.storage_kwargs() if heartbeat else {}
            return RetryingStorage(optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **kwargs))
    except SQLAlchemyError as err:
        raise StorageError(mask_secrets(f"storage {mask_url(url)} failed: {str(err).splitlines()[0]}", url)) from None
    finally:
        if lock_engine is not None:
            lock_engine.dispose()
