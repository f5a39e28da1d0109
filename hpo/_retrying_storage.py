"""RDB storage whose calls wait out a database restart instead of failing the worker."""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import optuna
from optuna.storages import BaseStorage, RDBStorage
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError, PendingRollbackError

_logger = logging.getLogger("hpo.storage")
# Long enough for a database restart or a short network outage; a longer one stops the worker.
RETRY_SECONDS = 300.0
_FIRST_DELAY, _MAX_DELAY = 0.5, 10.0
_F = TypeVar("_F", bound=Callable[..., Any])
# Set while a retried call runs on this thread, so that the private methods it calls in turn do
# not retry on their own: only the outermost call waits, and its deadline holds.
_in_retried_call = threading.local()


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and the exceptions it was raised from or while handling, innermost last."""
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _is_connection_error(err: BaseException) -> bool:
    """Whether ``err`` comes from a lost database connection, anywhere in its chain.

    RDBStorage re-raises SQLAlchemy errors as StorageInternalError, and a query it retries in
    the same session after a dropped connection fails with PendingRollbackError, the dropped
    connection being that error's context.
    """
    return any(
        isinstance(link, (OperationalError, InterfaceError, PendingRollbackError))
        or (isinstance(link, DBAPIError) and link.connection_invalidated)
        for link in _chain(err)
    )


def _committed_before_the_drop(name: str, err: Exception) -> bool:
    """Whether ``err``, on a retry, says an earlier attempt had committed before its connection dropped."""
    if name == "set_trial_state_values":
        return isinstance(err, optuna.exceptions.UpdateFinishedTrialError)
    if name in ("set_trial_param", "_set_trial_param"):
        return any(isinstance(link, IntegrityError) for link in _chain(err))  # the (trial, param) row is there already
    return False


def _retrying(name: str, method: _F) -> _F:
    @functools.wraps(method)
    def call(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
        if getattr(_in_retried_call, "active", False):
            return method(self, *args, **kwargs)
        deadline = time.monotonic() + RETRY_SECONDS
        delay, attempt = _FIRST_DELAY, 0
        _in_retried_call.active = True
        try:
            while True:
                try:
                    return method(self, *args, **kwargs)
                except Exception as err:
                    if attempt and _committed_before_the_drop(name, err):
                        return True if name == "set_trial_state_values" else None
                    if not _is_connection_error(err) or time.monotonic() + delay > deadline:
                        raise
                    attempt += 1
                    _logger.warning("storage call %s lost its database connection; retry %d in %.1f s", name, attempt, delay)
                    time.sleep(delay * (0.5 + random.random()))  # jitter: workers do not reconnect in lockstep
                    delay = min(delay * 2, _MAX_DELAY)
        finally:
            _in_retried_call.active = False

    return call  # type: ignore[return-value]


class RetryingRDBStorage(RDBStorage):
    """:class:`optuna.storages.RDBStorage` that retries calls which lost the database connection.

    Every storage call, heartbeats included, is retried with exponential backoff for up to
    ``RETRY_SECONDS`` when the connection fails (a PostgreSQL restart, a network blip); a trial
    in flight keeps training meanwhile and records its result once the database is back.
    """


# Optuna wraps an RDBStorage in _CachedStorage, which calls these private methods directly.
_CALLED_BY_OPTUNAS_CACHE = ["_create_new_trial", "_set_trial_param", "_get_best_trial_id", "_get_trials", "_get_stale_trial_ids"]
_RETRIED = [
    name for name in dir(BaseStorage) if not name.startswith("_") and callable(getattr(BaseStorage, name))
] + ["record_heartbeat", *_CALLED_BY_OPTUNAS_CACHE]
for _name in _RETRIED:
    setattr(RetryingRDBStorage, _name, _retrying(_name, getattr(RDBStorage, _name)))
