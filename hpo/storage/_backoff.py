"""The one retry schedule of this package: a database worker's lost connection, its storage's opening, a lost proxy.

Exponential and jittered, given up ``RETRY_SECONDS`` after the outage began: long enough for a
database (or proxy) restart or a short network outage; a longer one stops the worker with one line.
A worker told to stop (:func:`waiting_ends_on`) gives up at once instead of sitting out the bound.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

from hpo.storage._db_errors import StorageFailedError, is_creation_collision, is_lost_connection
from trial_executor._failures import error_chain

_logger = logging.getLogger("hpo.storage")
RETRY_SECONDS = 300.0
_FIRST_DELAY, _MAX_DELAY = 0.5, 10.0
_STOP_POLL_SECONDS = 0.2  # a signal does not cut time.sleep short (PEP 475): sleep in slices that look
_T = TypeVar("_T")


def _never() -> bool:
    return False


_stop_requested: Callable[[], bool] = _never


def retry_seconds() -> float:
    """The bound, read when needed (a test may shorten ``RETRY_SECONDS``)."""
    return RETRY_SECONDS


@contextlib.contextmanager
def waiting_ends_on(stop_requested: Callable[[], bool]) -> Iterator[None]:
    """Within the block, no :class:`Backoff` waits once ``stop_requested()`` is true (a worker's SIGINT or SIGTERM).

    Its storage call then fails at once with its one line, which says the worker did not wait: a
    worker told to stop during an outage ends within a fraction of a second, not after the bound.
    """
    global _stop_requested
    previous, _stop_requested = _stop_requested, stop_requested
    try:
        yield
    finally:
        _stop_requested = previous


def outage_waited() -> str:
    """How long an outage given up was waited out, for its one line."""
    return "and not waited for: this worker was told to stop" if _stop_requested() else f"for {retry_seconds():.0f} s"


class Backoff:
    """The one retry schedule of this package: exponential, jittered, given up after ``RETRY_SECONDS``."""

    def __init__(self, what: str, deadline: float | None = None) -> None:
        """``deadline``: when to give up (``time.monotonic()``), by default ``RETRY_SECONDS`` from now."""
        self.what = what
        self.attempt = 0
        self.deadline = time.monotonic() + RETRY_SECONDS if deadline is None else deadline
        self._delay = _FIRST_DELAY

    def wait(self, err: BaseException, *, happened: str | None = None, why: str | None = None) -> bool:
        """Sleep before the next attempt after ``err`` (a lost connection, or a collision while opening); ``False`` once the bound is reached or a stop is requested.

        ``happened`` and ``why`` word the warning for a storage other than a database (a lost proxy).
        """
        if _stop_requested() or time.monotonic() + self._delay > self.deadline:
            return False
        self.attempt += 1
        if why is None:
            why = next((str(link).strip().splitlines()[0] for link in error_chain(err) if isinstance(link, DBAPIError) and str(link).strip()), "")
        if happened is None:
            happened = "met another worker creating the schema" if is_creation_collision(err) else "lost its database connection"
        _logger.warning("%s %s (%s); retry %d in %.1f s", self.what, happened, why[:200], self.attempt, self._delay)
        wake = time.monotonic() + self._delay * (0.5 + random.random())  # jitter: workers do not reconnect in lockstep
        self._delay = min(self._delay * 2, _MAX_DELAY)
        while (left := wake - time.monotonic()) > 0:
            if _stop_requested():
                return False
            time.sleep(min(left, _STOP_POLL_SECONDS))
        return True


def retry_lost_connection(what: str, call: Callable[[], _T], *, lost: Callable[[BaseException], bool] | None = None) -> _T:
    """``call()``, repeated on the :class:`Backoff` schedule while it loses the database connection.

    For work outside a storage's calls, such as opening one; the last error is raised after the
    bound. ``lost``: which errors count as a lost connection (default :func:`is_lost_connection`).
    A worker told to stop (:func:`waiting_ends_on`) gets the outage's one line at once
    (:class:`StorageFailedError`), not the driver's error nor the bound's wording.
    """
    backoff = Backoff(what)
    while True:
        try:
            return call()
        except Exception as err:
            if not (lost or is_lost_connection)(err):
                raise
            if not backoff.wait(err):
                if _stop_requested():
                    state = "busy (another worker was creating its schema)" if is_creation_collision(err) else "unreachable"
                    raise StorageFailedError(f"storage {state} {outage_waited()} ({what}); rerun the same command to resume") from err
                raise
