"""A ``grpc://`` worker's storage: Optuna's gRPC proxy client, whose calls have a deadline and wait out a proxy restart.

Optuna's :class:`~optuna.storages.GrpcStorageProxy` sends each call once, without a deadline:
a proxy that stops fails the worker with a traceback, and one that hangs holds it for ever.
:class:`ProxyStorage` is that client with its stub wrapped (:class:`_BoundedStub`), so every
call, including the trial reads of Optuna's client cache, goes through one rule:

- each call has a deadline (:func:`call_deadline`): longer than the proxy's own wait for its
  database (``RETRY_SECONDS``), so a proxy waiting out a database restart is not given up on,
  and bounded, so a hung proxy costs one deadline, then one line;
- a call the proxy could not be reached for (``UNAVAILABLE``) is repeated on the database
  workers' schedule (:class:`~hpo.storage._backoff.Backoff`, up to ``RETRY_SECONDS``
  per outage) when repeating it is safe: a read, an idempotent write (attributes, parameters,
  intermediate values are upserts), or any call that never left this process (gRPC found no
  connection to send it on). A trial's creation or state change lost in flight may have been
  applied, and the proxy has no write tokens to tell (:mod:`hpo.storage._write_tokens` works on
  the database side only): that is one line, never a second trial or a second claim;
- what the proxy answers as Optuna's own errors (not found, already exists, finished trial,
  invalid value) goes to Optuna's client unchanged; any other failure of the proxy is one line.

Each line is a :class:`~hpo.storage._db_errors.StorageFailedError`, which the commands print
without a traceback; past the bound, the outage's later calls fail at their first loss, as
:class:`~hpo.storage._retrying_storage.RetryingStorage`'s do. The worker then exits; its
trial stays RUNNING (no heartbeats through a proxy) until the same command rerun on the same
machine finds its process gone, fails it and re-queues it from its checkpoint
(:mod:`hpo.study._liveness`); a trial whose claim or creation was the call lost in flight never
recorded its worker, and stays RUNNING.

Optuna internals relied on: ``GrpcStorageProxy._setup`` (which builds ``_channel``, ``_stub`` and ``_cache``,
also after unpickling; replaced here), ``api_pb2_grpc.StorageServiceStub`` and ``GrpcClientCache``; pinned by
``tests/hpo/storage/test_optuna_internals.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from optuna.storages import GrpcStorageProxy
from optuna.storages._grpc.auto_generated import api_pb2_grpc
from optuna.storages._grpc.client import GrpcClientCache

from hpo.storage._backoff import Backoff, outage_waited, retry_seconds
from hpo.storage._db_errors import StorageFailedError

# Calls a repeat cannot apply twice: reads, and writes that set a value (the same value again is no change).
IDEMPOTENT_CALLS = frozenset({
    "GetStudyIdFromName", "GetStudyNameFromId", "GetStudyDirections", "GetStudyUserAttributes", "GetStudySystemAttributes",
    "GetAllStudies", "GetTrialIdFromStudyIdTrialNumber", "GetTrial", "GetTrials",
    "SetStudyUserAttribute", "SetStudySystemAttribute", "SetTrialParameter", "SetTrialIntermediateValue",
    "SetTrialUserAttribute", "SetTrialSystemAttribute",
})
# The codes Optuna's servicer answers with for its own errors, which its client turns back into them.
_OPTUNAS_OWN = frozenset({
    grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.INVALID_ARGUMENT,
})
# gRPC's words when it had no connection to send a call on (the call never reached the proxy).
_NEVER_SENT = "failed to connect to all addresses"
_MAX_RECONNECT_MS = 5000


def call_deadline() -> float:
    """Seconds one call may take: the proxy's own bound for its database (``RETRY_SECONDS``), and a margin."""
    bound = retry_seconds()
    return bound + max(2.0, bound / 5)


class ProxyStorage(GrpcStorageProxy):
    """:class:`~optuna.storages.GrpcStorageProxy` whose calls have a deadline and wait out a proxy restart (module docstring)."""

    def _setup(self) -> None:
        # Optuna's channel, but reconnecting at least every few seconds: gRPC's own backoff grows to 120 s, and
        # until its next attempt every call fails at once, so a worker gave up on a proxy back for a minute.
        self._channel = grpc.insecure_channel(f"{self._host}:{self._port}", options=[
            ("grpc.max_receive_message_length", -1), ("grpc.max_reconnect_backoff_ms", _MAX_RECONNECT_MS),
        ])
        self._stub = _BoundedStub(api_pb2_grpc.StorageServiceStub(self._channel), f"{self._host}:{self._port}")
        self._cache = GrpcClientCache(self._stub)  # type: ignore[arg-type]  # its trial reads go through the same rule


class _BoundedStub:
    """Optuna's gRPC stub, each of whose calls follows the rule of the module docstring."""

    def __init__(self, stub: Any, address: str) -> None:
        self._stub = stub
        self._address = address
        self._outage_deadline: float | None = None  # one outage, one bound, whichever call meets it

    def __getattr__(self, name: str) -> Callable[[Any], Any]:
        method = getattr(self._stub, name)

        def call(request: Any) -> Any:
            return self._call(name, method, request)

        return call

    def _call(self, name: str, method: Callable[..., Any], request: Any) -> Any:
        backoff = Backoff(f"storage call {name}", self._outage_deadline)
        while True:
            try:
                response = method(request, timeout=self._timeout())
            except grpc.RpcError as err:
                if err.code() in _OPTUNAS_OWN:
                    raise
                self._outage_deadline = backoff.deadline
                repeatable = _repeatable(name, err)
                if repeatable and backoff.wait(err, happened=f"lost the storage proxy at {self._address}", why=_details(err)):
                    continue
                raise self._failure(name, err, repeatable) from err
            self._outage_deadline = None
            return response

    def _timeout(self) -> float:
        """A whole deadline, or within an outage what is left of its bound (given up: a second, to fail at the first loss)."""
        if self._outage_deadline is None:
            return call_deadline()
        return max(1.0, min(call_deadline(), self._outage_deadline - time.monotonic()))

    def _failure(self, name: str, err: grpc.RpcError, repeatable: bool) -> StorageFailedError:
        """The one line for ``err``; past the bound or a deadline, the outage's later calls fail at their first loss."""
        code = err.code()
        fix = "bring the proxy (python -m hpo.proxy) back"
        if repeatable:
            what = f"unreachable {outage_waited()}"
        elif code == grpc.StatusCode.UNAVAILABLE:
            what = "went away while it applied the call (whether it did is unknown, so it is not repeated)"
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
            what = f"did not answer within {call_deadline():.0f} s"
        else:  # the proxy answered with an error of its own (its database down, its file gone): it is up, its storage is not
            what, fix = f"failed ({code.name})", "fix what the proxy reports"
        if repeatable or code == grpc.StatusCode.DEADLINE_EXCEEDED:
            self._outage_deadline = time.monotonic()
        return StorageFailedError(
            f"storage proxy {self._address} {what} (storage call {name}: {_details(err)}); {fix}, then rerun the "
            "same command on this machine to resume (it re-queues a trial this worker left RUNNING)"
        )


def _repeatable(name: str, err: grpc.RpcError) -> bool:
    """Whether waiting and repeating ``name`` after ``err`` is safe and may help (module docstring)."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return False  # a deadline passed (a hung proxy) or the proxy failed the call: waiting will not help
    return name in IDEMPOTENT_CALLS or _NEVER_SENT in _details(err).lower()


def _details(err: grpc.RpcError) -> str:
    text = (err.details() or "").strip()
    return (text.splitlines()[0] if text else err.code().name)[:200]
