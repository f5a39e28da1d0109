"""A storage that waits out a lost database connection, and whose retried writes never lose or strand a trial.

Design: composition above Optuna's cache.
:class:`RetryingStorage` is a :class:`~optuna.storages.BaseStorage` holding
``_CachedStorage(RDBStorage)``, the very cache Optuna itself puts around every RDBStorage
(``optuna.storages.get_storage``). Each public call goes to the cache, and is repeated with
backoff when it lost the database connection. Optuna uses a storage that is not an RDBStorage
as it is, so there is one cache, ours, and nothing of Optuna's is patched.

Why above the cache and not below it: the cache calls private RDBStorage methods
(``_get_trials``, ``_create_new_trial``, ``_set_trial_param``, ``_get_best_trial_id``);
a wrapper below it would have to provide them. Above it, repeating a whole call is safe: the
cache updates itself only after its backend call has returned, so a call that failed left the
cache as it was.

Which errors are retried (:mod:`hpo.storage._db_errors`): a lost connection only (the connection
invalidated, a network-level OperationalError, PostgreSQL's connection and shutdown SQLSTATEs, a
deadlock, a locked SQLite file). A SQLite file that is missing, was deleted or replaced, or is read-only is not a lost
connection: it fails at once with one line (:class:`StorageFailedError`).

Why a retried write is safe:
- creating a study or a trial, and changing a trial's state (claiming a WAITING trial,
  finishing one), carry a write token committed with them (:mod:`hpo.storage._write_tokens`); a retry
  first looks it up and, when the earlier attempt committed, returns what that attempt would
  have returned: the new id, or True. A second insert under the same token fails instead of
  leaving an orphan (this also stops ``RDBStorage._create_new_trial``'s own re-run of its
  transaction). An unnamed study gets its name here, so a retry cannot invent a second one;
- deleting a study: a KeyError on a retry means the earlier attempt deleted it;
- every other write is idempotent: attributes, intermediate values and heartbeats are upserts,
  and RDBStorage ignores the duplicate (trial, param) row of a parameter already set.

The Optuna internals still relied on (``_CachedStorage``, the heartbeat interface, what
:mod:`hpo.storage._write_tokens` needs) are each pinned by ``tests/hpo/storage/test_optuna_internals.py``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Container, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import optuna
from optuna.storages import BaseStorage, RDBStorage, _CachedStorage
from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import text
from sqlalchemy.exc import InternalError, OperationalError

from hpo._attrs import FAIL_REASON_ATTR, WORKER_DIED
from hpo.storage._backoff import Backoff, outage_waited
from hpo.storage._db_errors import (
    StorageFailedError,
    committed_row_conflict,
    error_chain,
    is_lost_connection,
    sqlite_error_in,
)
from hpo.storage._sqlite_lock import sqlite_file_lock
from hpo.storage._trial_attrs import WRITE_TOGETHER, write_user_attrs
from hpo.storage._url_secrets import mask_url
from hpo.storage._write_tokens import WriteTokens

_logger = logging.getLogger("hpo.storage")
_T = TypeVar("_T")


def storage_failure_in(err: BaseException) -> StorageFailedError | None:
    """The first :class:`StorageFailedError` behind ``err`` (the innermost of its chain), if any.

    Optuna can mask it: when a trial's final write fails, ``_run_trial`` re-reads the trial,
    which fails too (at once: the outage is given up), and its ``finally`` then raises an
    UnboundLocalError. The final write's line is the one that says what happened.
    """
    failures = [link for link in error_chain(err) if isinstance(link, StorageFailedError)]
    return failures[-1] if failures else None


class RetryingStorage(BaseStorage, BaseHeartbeat):
    """Optuna's cached RDB storage, whose calls wait out a lost connection (see the module docstring).

    Every call, heartbeats included, is retried on :mod:`hpo.storage._backoff`'s schedule (up to
    ``RETRY_SECONDS``) when the connection fails (a PostgreSQL restart, a network blip); a trial
    in flight keeps training meanwhile and records its result once the database is back.
    """

    def __init__(self, rdb: RDBStorage) -> None:
        self._rdb = rdb
        self._cache = _CachedStorage(rdb)
        self._tokens = WriteTokens(rdb, is_lost_connection)
        self._sqlite_file = _SqliteFile.of(rdb)
        # One outage, one bound: when the calls that follow a first lost one give up, whatever thread makes them.
        self._outage_deadline: float | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_rdb": self._rdb, "_cache": self._cache}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._tokens = WriteTokens(self._rdb, is_lost_connection)
        self._sqlite_file = _SqliteFile.of(self._rdb)
        self._outage_deadline = None

    @property
    def engine(self) -> Any:
        """The SQLAlchemy engine, for the advisory locks and heartbeat queries of this project."""
        return self._rdb.engine

    # The retry loop ---------------------------------------------------------------------------

    def _call(self, name: str, call: Callable[[], _T], token: str | None = None,
              recovered: Callable[[int], _T] | None = None, done_on_retry: type[Exception] | None = None) -> _T:
        """``call()``, repeated while it loses the connection, until ``RETRY_SECONDS`` after the outage began.

        With ``token``, a retry first checks whether an earlier attempt committed, and if so
        returns ``recovered(id)`` of what it wrote. With ``done_on_retry``, that error on a
        retry means an earlier attempt did the work. Past the bound: :class:`StorageFailedError`,
        and every later call of the same outage fails at its first lost connection.
        """
        backoff = Backoff(f"storage call {name}", self._outage_deadline)
        value = self._retried(backoff, name, call, token, recovered, done_on_retry)
        # Connected, so a later outage gets a whole bound; unless the answer may be the cache's (a read, at first try).
        if backoff.attempt or not name.startswith("get_"):
            self._outage_deadline = None
        return value

    def _retried(self, backoff: Backoff, name: str, call: Callable[[], _T], token: str | None,
                 recovered: Callable[[int], _T] | None, done_on_retry: type[Exception] | None) -> _T:
        while True:
            try:
                # Inside the loop: stamping may create the token table, which can lose its connection too.
                with self._tokens.stamping(token):
                    self._sqlite_file.check()
                    if backoff.attempt and token is not None and (row_id := self._tokens.find(token)) is not None:
                        return recovered(row_id) if recovered else row_id  # type: ignore[return-value]
                    return call()
            except Exception as err:
                if token is not None and committed_row_conflict(err):
                    try:
                        row_id = self._tokens.find(token)
                    except Exception as lookup_err:
                        if not is_lost_connection(lookup_err):
                            raise
                        row_id, err = None, lookup_err  # the next attempt looks the token up first
                    if row_id is not None:
                        return recovered(row_id) if recovered else row_id  # type: ignore[return-value]
                if backoff.attempt and done_on_retry is not None and isinstance(err, done_on_retry):
                    return None  # type: ignore[return-value]
                if not is_lost_connection(err):
                    explained = self._explained(err, name)
                    if explained is err:
                        raise
                    raise explained from err
                self._outage_deadline = backoff.deadline
                if backoff.wait(err):
                    continue
                if not backoff.attempt:  # past the bound when this call began: one more try, on a fresh connection
                    backoff.attempt = 1  # (the database may be back, the pool's connection stale)
                    continue
                self._outage_deadline = time.monotonic()  # given up: the outage's later calls too, without waiting
                raise StorageFailedError(
                    f"storage {self._shown_url} unreachable {outage_waited()} (storage call {name}); "
                    "bring the database back, then rerun the same command to resume"
                ) from err

    @property
    def _shown_url(self) -> str:
        return mask_url(self._rdb.engine.url.render_as_string(hide_password=False))

    def _explained(self, err: Exception, name: str) -> Exception:
        """``err`` itself, or for a database that cannot be used as it is, one line that says so.

        That is a SQLite error other than a constraint, or a server-side OperationalError or
        InternalError that is not a lost connection (PostgreSQL read-only, disk full).
        """
        if isinstance(err, StorageFailedError):
            return err
        cause = sqlite_error_in(err)
        if cause is not None and not isinstance(cause, sqlite3.IntegrityError):
            return StorageFailedError(
                f"storage call {name} failed on SQLite database {self._sqlite_file.path}: {cause} "
                "(not a lost connection, so not retried); make the file writable or restore it, then rerun to resume"
            )
        refused = next((link for link in error_chain(err) if isinstance(link, (OperationalError, InternalError))), None)
        if refused is None:
            return err
        first = str(refused.orig).strip().splitlines()[0] if str(refused.orig).strip() else type(refused.orig).__name__
        return StorageFailedError(
            f"storage call {name} failed on {self._shown_url}: {first} "
            "(not a lost connection, so not retried); fix the database, then rerun to resume"
        )

    # Writes -----------------------------------------------------------------------------------

    def create_new_study(self, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        # Named here, not by RDBStorage: a retry then re-sends the same name and cannot make a second study.
        name = DEFAULT_STUDY_NAME_PREFIX + str(uuid.uuid4()) if study_name is None else study_name
        return self._call("create_new_study", lambda: self._cache.create_new_study(directions, name), self._tokens.new())

    def delete_study(self, study_id: int) -> None:
        self._call("delete_study", lambda: self._cache.delete_study(study_id), done_on_retry=KeyError)

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._call("set_study_user_attr", lambda: self._cache.set_study_user_attr(study_id, key, value))

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._call("set_study_system_attr", lambda: self._cache.set_study_system_attr(study_id, key, value))

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        def recovered(trial_id: int) -> int:
            self._cache.get_all_trials(study_id, deepcopy=False)  # the cache learns the trial its failed call did not return
            return trial_id

        return self._call(
            "create_new_trial", lambda: self._cache.create_new_trial(study_id, template_trial), self._tokens.new(), recovered
        )

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float, distribution: Any) -> None:
        self._call("set_trial_param", lambda: self._cache.set_trial_param(trial_id, param_name, param_value_internal, distribution))

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        # RUNNING is Optuna taking a WAITING trial (an enqueued or requeued one): it reads the state,
        # then writes it. On SQLite two workers could both read WAITING and both run the trial;
        # under the file's lock the second reads RUNNING and takes another (PostgreSQL: FOR UPDATE).
        taking = self._sqlite_file.locked() if state == TrialState.RUNNING else contextlib.nullcontext()
        with taking:
            return self._call(
                "set_trial_state_values",
                lambda: self._cache.set_trial_state_values(trial_id, state, values),
                self._tokens.new(),
                recovered=lambda _: True,  # the state change this call asked for committed
            )

    def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
        self._call("set_trial_intermediate_value", lambda: self._cache.set_trial_intermediate_value(trial_id, step, intermediate_value))

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._call("set_trial_user_attr", lambda: self._cache.set_trial_user_attr(trial_id, key, value))

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        """Several user attrs of one running trial in one transaction, all of them or (an error) none; retried whole,
        as an upsert is (:mod:`hpo.storage._trial_attrs`)."""
        self._call(WRITE_TOGETHER, lambda: write_user_attrs(self._rdb, trial_id, attrs))

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._call("set_trial_system_attr", lambda: self._cache.set_trial_system_attr(trial_id, key, value))

    def record_heartbeat(self, trial_id: int) -> None:
        try:
            self._call("record_heartbeat", lambda: self._cache.record_heartbeat(trial_id))
        except StorageFailedError as err:
            # Optuna's heartbeat thread would die with a traceback; the trial's next call on the
            # worker's own thread fails the same way and stops the worker with one line.
            _logger.debug("heartbeat of trial %d not recorded: %s", trial_id, err)

    # Reads ------------------------------------------------------------------------------------

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._call("get_study_id_from_name", lambda: self._cache.get_study_id_from_name(study_name))

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._call("get_study_name_from_id", lambda: self._cache.get_study_name_from_id(study_id))

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._call("get_study_directions", lambda: self._cache.get_study_directions(study_id))

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._call("get_study_user_attrs", lambda: self._cache.get_study_user_attrs(study_id))

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._call("get_study_system_attrs", lambda: self._cache.get_study_system_attrs(study_id))

    def get_all_studies(self) -> list[optuna.study.FrozenStudy]:
        return self._call("get_all_studies", self._cache.get_all_studies)

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self._call(
            "get_trial_id_from_study_id_trial_number", lambda: self._cache.get_trial_id_from_study_id_trial_number(study_id, trial_number)
        )

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._call("get_trial", lambda: self._cache.get_trial(trial_id))

    def get_all_trials(self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._call("get_all_trials", lambda: self._cache.get_all_trials(study_id, deepcopy=deepcopy, states=states))

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        return self._call("get_best_trial", lambda: self._cache.get_best_trial(study_id))

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        # Part of Optuna's heartbeat interface (BaseHeartbeat), called by fail_stale_trials: Optuna's sweep before each
        # trial, and this project's. A PostgreSQL server up for less than the grace period was restarted: no heartbeat
        # could land while it was down, so a trial silent for that long may be alive, its worker about to beat again.
        stale = self._call("_get_stale_trial_ids", lambda: self._cache._get_stale_trial_ids(study_id))
        grace = self._rdb.grace_period or 2 * (self.get_heartbeat_interval() or 0)
        if stale and self._server_uptime() < grace:
            return []
        for trial_id in stale:  # Optuna fails them with no reason; its run line, status and report then say why
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):  # another worker's sweep was first
                self.set_trial_user_attr(trial_id, FAIL_REASON_ATTR, f"{WORKER_DIED}: no heartbeat for {grace} s (the grace period)")
        return stale

    def _server_uptime(self) -> float:
        """Seconds since the PostgreSQL server started (infinite for SQLite, whose file has no restart)."""
        if self._rdb.engine.dialect.name != "postgresql":
            return math.inf

        def uptime() -> float:
            with self._rdb.engine.connect() as connection:
                return float(connection.execute(text("SELECT EXTRACT(EPOCH FROM now() - pg_postmaster_start_time())")).scalar_one())

        return self._call("server_uptime", uptime)

    def get_heartbeat_interval(self) -> int | None:
        return self._rdb.get_heartbeat_interval()

    @property
    def grace_period(self) -> int | None:
        """Seconds without a heartbeat after which a RUNNING trial is stale (``None``: twice the interval)."""
        return self._rdb.grace_period

    def get_heartbeat_stale_trial_callback(self) -> Callable[[optuna.Study, FrozenTrial], None] | None:
        return self._rdb.get_heartbeat_stale_trial_callback()

    def remove_session(self) -> None:
        self._rdb.remove_session()


class _SqliteFile:
    """The SQLite file under a storage: deleted or replaced while in use, it fails the next call."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._identity = self._stat()

    @classmethod
    def of(cls, rdb: RDBStorage) -> _SqliteFile:
        database = rdb.engine.url.database if rdb.engine.dialect.name == "sqlite" else None
        return cls(Path(database).expanduser().resolve() if database and database != ":memory:" else None)

    def _stat(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        stat = os.stat(self.path)
        return stat.st_dev, stat.st_ino

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """This file's lock among this machine's processes (no lock without a file)."""
        return sqlite_file_lock(str(self.path) if self.path is not None else None)

    def check(self) -> None:
        if self.path is None:
            return
        try:
            identity = self._stat()
        except FileNotFoundError:
            identity = None
        if identity != self._identity:
            what = "deleted" if identity is None else "replaced by another file"
            raise StorageFailedError(
                f"SQLite database {self.path} was {what} while in use (not a lost connection, so not retried); "
                "restore the file, then rerun to resume"
            )
