"""RDB storage whose calls wait out a database restart instead of failing the worker."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import optuna
from optuna.storages import BaseStorage, RDBStorage
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

_logger = logging.getLogger("hpo.storage")
# Long enough for a database restart or a short network outage; a longer one stops the worker.
RETRY_SECONDS = 300.0
_FIRST_DELAY, _MAX_DELAY = 0.5, 10.0
_F = TypeVar("_F", bound=Callable[..., Any])


def _is_connection_error(err: BaseException) -> bool:
    # RDBStorage re-raises SQLAlchemy errors from its sessions as StorageInternalError.
    cause = err.__cause__ if isinstance(err, optuna.exceptions.StorageInternalError) else err
    if isinstance(cause, (OperationalError, InterfaceError)):
        return True
    return isinstance(cause, DBAPIError) and cause.connection_invalidated


def _retrying(name: str, method: _F) -> _F:
    @functools.wraps(method)
    def call(self: RDBStorage, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + RETRY_SECONDS
        delay, attempt = _FIRST_DELAY, 0
        while True:
            try:
                return method(self, *args, **kwargs)
            except optuna.exceptions.UpdateFinishedTrialError:
                # An earlier attempt committed before its connection dropped: the state is set.
                if attempt and name == "set_trial_state_values":
                    return True
                raise
            except Exception as err:
                if not _is_connection_error(err) or time.monotonic() + delay > deadline:
                    raise
                attempt += 1
                _logger.warning("storage call %s lost its database connection; retry %d in %.1f s", name, attempt, delay)
                time.sleep(delay * (0.5 + random.random()))  # jitter: workers do not reconnect in lockstep
                delay = min(delay * 2, _MAX_DELAY)

    return call  # type: ignore[return-value]


class RetryingRDBStorage(RDBStorage):
    """:class:`optuna.storages.RDBStorage` that retries calls which lost the database connection.

    Every storage call, heartbeats included, is retried with exponential backoff for up to
    ``RETRY_SECONDS`` when the connection fails (a PostgreSQL restart, a network blip); a trial
    in flight keeps training meanwhile and records its result once the database is back.
    """


_RETRIED = [
    name for name in dir(BaseStorage) if not name.startswith("_") and callable(getattr(BaseStorage, name))
] + ["record_heartbeat", "_get_stale_trial_ids"]
for _name in _RETRIED:
    setattr(RetryingRDBStorage, _name, _retrying(_name, getattr(RDBStorage, _name)))
