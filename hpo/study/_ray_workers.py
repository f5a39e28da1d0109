"""Workers as Ray actors across a cluster: placed on GPUs (or fractions of one), restarted by Ray when they die.

Each actor is a normal worker: it runs the study's own per-worker path (``work``, see
``hpo._api.run_job``) against the study's storage, so the budget, heartbeats, checkpoints and
re-queues work exactly as with ``--workers N``; Ray only places, starts and restarts them.
Ray is an optional extra: it is imported here, when ``--ray`` is asked for, and nowhere else.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._errors import UserError
from hpo._ranking import end_order
from hpo.storage._backoff import waiting_ends_on
from hpo.study._budget import finished_when
from hpo.study._liveness import GPU_SHARED_ENV, RAY_DRIVER_ENV
from hpo.study._outcomes import quiet_trial_failures
from hpo.study._ray_cluster import LOCAL_CLUSTER, RayCluster, RayRun, cluster_nodes
from hpo.study._workers import WORKER_INDEX_ENV

_logger = logging.getLogger(__name__)
RAY_EXTRA = "pip install 'precision-hpo[ray]'"
# A worker whose process (or node) dies is restarted, and its run retried, this many times.
MAX_RESTARTS = 3
# Seconds an explicit --ray address has to accept a connection before the run is refused.
RAY_CONNECT_TIMEOUT_S = 10.0
# How long a stopped worker may take to checkpoint its trial before it is killed.
STOP_GRACE_S = 120.0
# How often the driver looks for Ctrl-C while it waits: a signal's handler runs only between Ray's waits,
# and a stop that reaches the workers a tick late lets a trial it should have interrupted run on.
STOP_POLL_S = 0.1
# How long killed actors may take to be dead before the driver fails their trials (else the heartbeat does).
KILLED_WAIT_S = 10.0

Work = Callable[[Callable[[], bool]], None]  # runs the worker's share of the study until the budget or stop_requested()


class WorkerLostError(RuntimeError):
    """A Ray worker died more often than it may be restarted."""


def require_ray() -> ModuleType:
    """The ``ray`` module, or a :class:`UserError` naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--ray needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


def _is_sqlite(url: str) -> bool:
    return url.lower().startswith("sqlite")


def refuse_shared_sqlite(storage_url: str, address: str | None, nodes: int) -> None:
    """A SQLite file lives on one machine: refused for workers on several nodes or behind Ray Client."""
    client = (address or "").startswith("ray://")
    if _is_sqlite(storage_url) and (nodes > 1 or client):
        where = "through Ray Client" if client else f"on {nodes} nodes"
        raise UserError(
            f"--ray {address}: a SQLite file cannot be shared by workers {where}; use PostgreSQL "
            "(--storage postgresql://user:pass@host:5432/db) or the gRPC proxy (python -m hpo.proxy, --storage grpc://host:port)"
        )


def check_reachable(address: str | None) -> None:
    """An explicit ``host:port`` (or ``ray://host:port``) must answer: ``ray.init`` waits for a GCS there without end.

    ``auto`` and none (a cluster started here) are Ray's to find.
    """
    if address is None or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    # Another scheme (http://head:8265, the dashboard's) left a host "http://head": its lookup failed as an unknown name.
    if not host or not port.isdigit() or "://" in host:
        raise UserError(f"--ray {address}: not an address; give host:port (the head's GCS, e.g. 127.0.0.1:6379), ray://host:10001 or auto")
    if not 0 < int(port) < 2**16:  # else 'Connection refused' from the OS, as if nothing listened there
        raise UserError(f"--ray {address}: port {port} is out of range (1-65535); give the head's GCS port, e.g. 6379")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__.replace("Error", " error").lower()
        raise UserError(
            f"--ray {address}: nothing answers there ({reason}); start the cluster (`ray start --head`) or fix --ray"
        ) from None


def _init(ray: ModuleType, address: str | None) -> None:
    """``ray.init``, with this process's signal handlers kept and a refused connection said in one line."""
    # ray.init installs its own SIGTERM handler (sys.exit): the command's, which checkpoints and
    # re-queues the running trials, must stay (a SIGTERM otherwise left them RUNNING).
    main = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    # log_to_driver: each worker's warnings show on the driver's terminal. A cluster started here gives
    # its node the loopback address (Ray's own servers may still listen on every address of the machine).
    local = {"_node_ip_address": "127.0.0.1"} if address is None else {}
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=True, configure_logging=False, **local)
    except (ConnectionError, TimeoutError) as err:  # `auto` with no cluster running, a cluster refusing this driver
        first = str(err).strip().split(". ")[0].splitlines()[0] if str(err).strip() else type(err).__name__  # Ray's advice names its own flags
        flag = f"--ray {address}" if address else "--ray"
        raise UserError(f"{flag}: {first}; start the cluster (`ray start --head`) or fix --ray") from None
    finally:
        for number, handler in handlers.items():
            if handler is not None:
                signal.signal(number, handler)


def connect(address: str | None, storage_url: str) -> RayCluster:
    """Connect to the Ray cluster at ``address`` (``auto``, ``host:port``, ``ray://host:port``), or start one here.

    SQLite with a cluster of several nodes (or Ray Client) is refused before anything is written.
    """
    refuse_shared_sqlite(storage_url, address, nodes=1)  # Ray Client: refused before connecting
    already = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    if not already:
        check_reachable(address)  # before importing Ray (seconds): a wrong address is told at once
    ray = require_ray()
    started_here = address is None and not already
    if not already:
        _init(ray, address)
    cluster = RayCluster(ray=ray, address=address or LOCAL_CLUSTER, node_list=cluster_nodes(ray), started_here=started_here)
    try:
        refuse_shared_sqlite(storage_url, address, cluster.nodes)
    except UserError:
        cluster.shutdown()
        raise
    return cluster


class _Worker:
    """The body of one Ray actor: runs ``work`` until the budget, or until :meth:`stop` is called."""

    def __init__(self, index: int, trials_per_gpu: int, driver: str | None = None) -> None:
        self._stop = threading.Event()
        # Read by the objective when it records where each trial ran (hpo.study._liveness).
        os.environ[WORKER_INDEX_ENV] = str(index)
        if driver is not None:
            os.environ[RAY_DRIVER_ENV] = driver
        os.environ[GPU_SHARED_ENV] = str(trials_per_gpu)
        # The driver prints each trial's line; Ray relays whatever a worker logs, so workers log only warnings.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        quiet_trial_failures()

    def run(self, work: Work) -> None:
        work(self._stop.is_set)

    def stop(self) -> None:
        self._stop.set()

    def assigned_resources(self) -> dict[str, Any]:
        import ray

        return dict(ray.get_runtime_context().get_assigned_resources())


def start_workers(cluster: RayCluster, run: RayRun, driver: str | None = None) -> list[Any]:
    """The actors, placed by Ray on the resources ``run`` reserves; a dead one is restarted (its run retried).

    ``driver`` (the driver's run, any unique string) is recorded in each trial's ``worker`` attr.
    """
    actor = cluster.ray.remote(_Worker).options(
        num_cpus=run.cpus_per_trial, num_gpus=run.gpus_per_trial, max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS,
        max_concurrency=2,  # run() and stop() at once: stop() reaches a worker in the middle of its trial
    )
    return [actor.remote(index, run.trials_per_gpu, driver) for index in range(run.workers)]


def wait_for_workers(
    cluster: RayCluster, actors: list[Any], work: Work, *, stop_requested: Callable[[], bool],
    tick: Callable[[], None] | None = None, tick_every: float = 2.0, on_killed: Callable[[], None] | None = None,
) -> None:
    """Run ``work`` in every actor until the budget; on ``stop_requested()`` or a worker's error, stop them all.

    ``stop_requested`` is polled every ``STOP_POLL_S``, ``tick`` (the caller's progress display) every
    ``tick_every`` seconds. Stopped workers checkpoint their trials and leave them WAITING (``STOP_GRACE_S`` at most).
    A worker's exception (a storage it cannot reach, say) is raised here, in the driver, once
    the others have stopped; a worker that died past its restarts raises :class:`WorkerLostError`.
    Workers killed in the middle of their trials (a second signal: KeyboardInterrupt here; or a stop past
    its grace) are waited for until Ray has them dead (``KILLED_WAIT_S`` at most), then ``on_killed()`` is
    called to fail and re-queue their trials. Not after a worker's error, which may be the storage's own.
    """
    ray = cluster.ray
    shared = ray.put(work)  # one copy of the data in the object store, not one per actor; kept for retried runs
    pending = {actor.run.remote(shared): index for index, actor in enumerate(actors)}
    error: BaseException | None = None
    deadline: float | None = None
    next_tick = time.monotonic() + tick_every
    killing = False  # the workers are to be killed mid-trial, not after a worker's error (which may be the storage's)
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=STOP_POLL_S)
            for ref in done:
                index = pending.pop(ref)
                try:
                    ray.get(ref)
                except ray.exceptions.RayTaskError as err:
                    error = error or err.cause
                except ray.exceptions.RayActorError as err:
                    error = error or WorkerLostError(
                        f"Ray worker {index} died and was restarted {MAX_RESTARTS} times; last: {str(err).strip().splitlines()[0]}"
                    )
            if deadline is None and (error is not None or stop_requested()):
                deadline = time.monotonic() + STOP_GRACE_S
                for actor in actors:
                    actor.stop.remote()
            if deadline is not None and time.monotonic() > deadline:
                killing = error is None
                break  # killed below, mid-trial
            if tick is not None and time.monotonic() >= next_tick:
                tick()  # the caller's database reads, at their own pace
                next_tick = time.monotonic() + tick_every
    except KeyboardInterrupt:  # a second signal: the workers are killed at once, in the middle of their trials
        killing = error is None
        raise
    finally:
        _kill(ray, actors, list(pending), on_killed if killing else None)
    if error is not None:
        raise error


def _kill(ray: ModuleType, actors: list[Any], running: list[Any], on_killed: Callable[[], None] | None) -> None:
    """Kill ``actors``; with ``on_killed``, call it once the ``running`` work of theirs has resolved (``KILLED_WAIT_S`` at most).

    ``on_killed`` waits out no storage outage, and its failure is a warning: the heartbeat fails those trials later.
    """
    for actor in actors:
        ray.kill(actor, no_restart=True)
    if not running or on_killed is None:
        return
    # A killed actor's run resolves once Ray has marked it dead, which may be a moment before its process is gone
    # (Ray force-kills a worker that does not exit soon after): in between, the storage refuses its writes to a
    # trial failed here (Optuna never updates a finished trial). An unresolved run leaves its trial to the heartbeat.
    _, unresolved = ray.wait(running, num_returns=len(running), timeout=KILLED_WAIT_S)
    if unresolved:
        return
    try:
        with waiting_ends_on(lambda: True):
            on_killed()
    except Exception as err:
        _logger.warning("the killed Ray workers' trials stay RUNNING until the heartbeat fails them: %s", err)


class TrialWatcher:
    """Trials that ended since the last call, for a driver that runs none itself (progress lines, callbacks)."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self._seen = {t.number for t in self._ended()}

    def _ended(self) -> list[FrozenTrial]:
        return self._study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))

    def new(self) -> list[tuple[FrozenTrial, int]]:
        """The trials that ended since the last call, in the order they ended, each with the study's finished count
        (toward its budget) when it ended: of several that ended between two calls, each shows where the study stood then."""
        ended = self._ended()
        fresh = sorted((t for t in ended if t.number not in self._seen), key=end_order)
        self._seen |= {t.number for t in fresh}
        return [(t, finished_when(ended, t)) for t in fresh]
