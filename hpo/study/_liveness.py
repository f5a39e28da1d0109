"""Which RUNNING trials belong to a worker process of this machine that is gone, or to a worker that died claiming them.

Heartbeats find a dead worker's trial only once ``grace_period`` (default 2 min) has passed
without a beat: a worker killed with SIGKILL and rerun at once would finish before then and
leave the trial RUNNING. Each trial records its worker's identity (host, pid, and the
process's boot, pid namespace and start time); a worker sweeps, when it starts and when it
ends, the RUNNING trials whose process on this very machine no longer exists, and fails them
as a stale heartbeat would (re-queued under the trial's own retry policy). A trial from another
machine, container or boot is left to the heartbeats; one that never beat nor wrote its identity
(its worker died inside Optuna's ``ask``) is failed once the grace period has passed
(:func:`died_claiming`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import sys
from datetime import datetime
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import (
    FAIL_REASON_ATTR,
    GPU_FRACTION_KEY,
    MAX_RETRY_KEY,
    NODE_KEY,
    RAY_ACTOR_KEY,
    RAY_DRIVER_KEY,
    RAY_NODE_KEY,
    RAY_WORKER_KEY,
    TRIALS_PER_GPU_KEY,
    WORKER_ATTR,
    WORKER_DIED,
    retry_policy_of,
)
from hpo._process import has_exited, numbered_here, process_key
from hpo.storage._checkpoints import CheckpointSweep
from hpo.storage._heartbeats import heartbeat_ages
from hpo.storage._retry_policy import RetryByTrialPolicy, retry_left
from hpo.study._outcomes import INTERRUPTED, never_ran

# How long a failed trial's re-queue may still be on its way where the storage keeps no heartbeats (and so no grace period).
_NO_HEARTBEAT_WAIT_S = 120.0
# Set by the launchers (--workers with --gpus, --ray with --gpus-per-trial): how many workers' trials share this worker's GPU.
GPU_SHARED_ENV = "HPO_TRIALS_PER_GPU"
# Set in each Ray actor: the run of the driver that started it, which fails that run's trials once it killed its actors.
RAY_DRIVER_ENV = "HPO_RAY_DRIVER"


def _ray_placement() -> dict[str, Any]:
    """Where Ray placed this process: node, worker and actor ids, its GPU share; ``{}`` outside a Ray actor."""
    ray = sys.modules.get("ray")  # never imported here: Ray is an optional extra
    if ray is None or not ray.is_initialized():
        return {}
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:  # the driver, not one of its workers
        return {}
    return {
        RAY_NODE_KEY: context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
        RAY_WORKER_KEY: context.get_worker_id(), RAY_ACTOR_KEY: context.get_actor_id(), RAY_DRIVER_KEY: os.environ.get(RAY_DRIVER_ENV),
        GPU_FRACTION_KEY: float(context.get_assigned_resources().get("GPU", 0.0)),
    }


def worker_identity(trial_number: int, max_retry: int | None) -> dict[str, Any]:
    """What trial ``trial_number`` records about the process that runs it (user attr ``worker``), ``max_retry`` (its
    run's ``--max-retry``) included: the trial's retry policy, whichever worker finds it failed."""
    return {
        "host": socket.gethostname(), NODE_KEY: socket.gethostname(), "pid": os.getpid(), MAX_RETRY_KEY: max_retry,
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), TRIALS_PER_GPU_KEY: int(os.environ.get(GPU_SHARED_ENV) or 1),
        "process": process_key(os.getpid()), "trial": trial_number, **_ray_placement(),
    }


def _earlier_incarnation_of_this_actor(worker: dict[str, Any]) -> bool:
    """A Ray actor has one live process: a trial of this actor from another process is from one that died (on any node)."""
    mine = _ray_placement()
    return bool(mine) and worker.get(RAY_ACTOR_KEY) == mine[RAY_ACTOR_KEY] and worker.get(RAY_WORKER_KEY) != mine[RAY_WORKER_KEY]


def _own_worker(trial: FrozenTrial) -> dict[str, Any] | None:
    """The identity ``trial``'s own worker wrote (``None`` before it did)."""
    worker = trial.user_attrs.get(WORKER_ATTR)
    # A retry starts with a copy of its predecessor's attrs, dead worker included, until its own worker writes its own.
    return worker if isinstance(worker, dict) and worker.get("trial") == trial.number else None


def _ran_here(worker: dict[str, Any]) -> bool:
    """Whether ``worker`` ran on this machine, in this pid namespace and boot (so its process can be checked from here)."""
    if not isinstance(worker.get("process"), str) or not isinstance(worker.get("pid"), int):
        return False
    return numbered_here(worker["process"])


def worker_is_gone(trial: FrozenTrial) -> bool:
    """Whether ``trial``'s worker ran on this machine, in this pid namespace, and has exited."""
    worker = _own_worker(trial)
    if worker is None:
        return False
    if _earlier_incarnation_of_this_actor(worker):
        return True
    if not _ran_here(worker):
        return False  # another machine, container or boot: only its heartbeat can tell
    return has_exited(worker["process"])  # exited, or the pid now names another process


def died_claiming(trial: FrozenTrial, storage: optuna.storages.BaseStorage) -> bool:
    """Whether ``trial``'s worker died while claiming it, inside Optuna's ``ask`` (sampling, on any machine).

    Such a trial is RUNNING without a heartbeat, which could go stale, nor an identity of its own
    (written first thing by the objective, with the heartbeat already beating): once it has been so for
    the heartbeats' grace period, no live worker is that slow to start it. A trial that ever beat is the
    heartbeats' to judge.
    """
    if _own_worker(trial) is not None:
        return False
    grace = _grace_seconds(storage)
    if grace is None or _within_grace(trial, grace):  # without heartbeats nothing tells a dead worker's trial from a slow one
        return False
    # A trial of an objective that writes no identity (hpo.run_to_budget's caller's own) beats all the same.
    return trial._trial_id not in heartbeat_ages(storage, [trial._trial_id])


def releasable(trials: list[FrozenTrial], storage: optuna.storages.BaseStorage) -> list[FrozenTrial]:
    """Those of the RUNNING ``trials`` that a sweep will release if their worker dies: they beat (a stale beat is failed),
    or may yet (claimed within the grace period), or their worker ran on this machine (:func:`worker_is_gone` sees it
    exit). A trial whose worker keeps no heartbeat (a ``grpc://`` worker's: the proxy records none), ran elsewhere and
    has run past the grace period is not: only its worker, or a rerun where it ran, ends it.
    """
    grace = _grace_seconds(storage)
    if grace is None:
        return []
    beating = heartbeat_ages(storage, [t._trial_id for t in trials])
    return [t for t in trials
            if t._trial_id in beating or _within_grace(t, grace) or ((worker := _own_worker(t)) is not None and _ran_here(worker))]


def _grace_seconds(storage: optuna.storages.BaseStorage) -> float | None:
    """Seconds without a heartbeat after which a trial is stale; ``None`` without heartbeats."""
    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    if interval is None:
        return None
    return getattr(storage, "grace_period", None) or 2 * interval  # Optuna's default when none is set


def _within_grace(trial: FrozenTrial, grace: float) -> bool:
    """Whether ``trial`` was claimed at most ``grace`` seconds ago (or has no start time)."""
    # Optuna's own clock: naive local time.
    return trial.datetime_start is None or (datetime.now() - trial.datetime_start).total_seconds() <= grace


def lost_retries(trials: list[FrozenTrial], storage: optuna.storages.BaseStorage, max_retry: int | None) -> list[FrozenTrial]:
    """The failed ``trials`` whose re-queue was lost: a worker fails a trial it was told to stop, or found dead, then
    re-queues it (two storage calls), and died or lost its storage between the two.

    Such a trial says why it failed (``interrupted``, ``worker_died: ...``) or lost that write too (no reason, see
    :func:`_retried_on_failure`), no trial names it in
    its ``retry_history``, ``max_retry`` allowed one more retry, and it failed longer than the grace
    period ago (a worker's own re-queue, a moment after its fail, is not still on its way).
    """
    requeued = {number for t in trials for number in t.system_attrs.get("retry_history", ())}
    wait = _requeue_wait_s(storage)
    return [
        t for t in trials
        if t.state == TrialState.FAIL and t.number not in requeued and _retried_on_failure(t, max_retry, trials)
        and not _failed_within(t, wait)
    ]


def retry_may_come(
    trial: FrozenTrial, trials: list[FrozenTrial], storage: optuna.storages.BaseStorage, max_retry: int | None,
) -> bool:
    """Whether a re-queued copy of the failed ``trial`` (one of the study's ``trials``) may yet appear, if none has: its
    worker's own re-queue may be on its way (it failed within the grace period), or the retry policy re-queues it (a
    lost re-queue, :func:`lost_retries`)."""
    return trial.state == TrialState.FAIL and (
        _failed_within(trial, _requeue_wait_s(storage)) or _retried_on_failure(trial, max_retry, trials)
    )


def checkpoint_sweep(study: optuna.Study, max_retry: int | None, *, keep: bool) -> CheckpointSweep:
    """What a run with this retry policy (and ``--keep-checkpoints`` or not) sweeps from its artifact store when it starts."""
    return CheckpointSweep(study, functools.partial(retry_may_come, storage=study._storage, max_retry=max_retry), never_ran, keep=keep)


def _requeue_wait_s(storage: optuna.storages.BaseStorage) -> float:
    return _grace_seconds(storage) or _NO_HEARTBEAT_WAIT_S


def _failed_within(trial: FrozenTrial, seconds: float) -> bool:
    # Optuna's own clock: naive local time.
    return trial.datetime_complete is None or (datetime.now() - trial.datetime_complete).total_seconds() <= seconds


def _retried_on_failure(trial: FrozenTrial, max_retry: int | None, trials: list[FrozenTrial]) -> bool:
    """Whether the retry policy re-queues ``trial``: it failed stopped, with its worker dead, or, once this project's
    objective started it, with no reason at all; with a retry left (:func:`retry_left`, ``trials`` its predecessors).

    Every way this project fails a trial it started writes the reason first; such a trial failing without one lost
    that write (a second signal's ``interrupted`` mark in an outage, say): a retry resumes its checkpoint and, if the
    trial itself fails, records why. Another objective's failures (``run_to_budget`` is public), and a queued trial
    skipped before it started (its hand-back copy, if any, stands for it), say nothing of the kind: not retried.
    """
    reason = trial.user_attrs.get(FAIL_REASON_ATTR)
    lost_reason = reason is None and _own_worker(trial) is not None
    crashed_or_stopped = lost_reason or reason == INTERRUPTED or str(reason).startswith(f"{WORKER_DIED}:")
    return crashed_or_stopped and retry_left(trial, retry_policy_of(trial, max_retry), trials)


def fail_dead_local_trials(study: optuna.Study, max_retry: int | None) -> list[int]:
    """Fail the study's RUNNING trials whose worker process on this machine is gone, or that died claiming them; their numbers.

    Each is then re-queued (up to ``max_retry`` times) by Optuna's
    ``RetryHeartbeatStaleTrialCallback``, exactly as a trial whose heartbeat went stale.
    """
    storage = study._storage
    dead = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if worker_is_gone(trial):
            dead.append((trial, "its worker process exited mid-trial"))
        elif died_claiming(trial, storage):
            dead.append((trial, "its worker died claiming it (no identity nor heartbeat for the grace period)"))
    return fail_and_requeue(study, dead, max_retry)


def fail_trials_of_killed_actors(study: optuna.Study, driver: str, max_retry: int | None) -> list[int]:
    """Fail and re-queue the study's RUNNING trials of the Ray actors that the driver run ``driver`` started, and
    killed (they are dead: the caller waited for Ray to say so); their numbers."""
    why = "its Ray worker was killed by the driver (a second signal, or a stop past its grace)"
    return fail_and_requeue(study, [
        (trial, why) for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if (_own_worker(trial) or {}).get(RAY_DRIVER_KEY) == driver
    ], max_retry)


def fail_and_requeue(study: optuna.Study, dead: list[tuple[FrozenTrial, str]], max_retry: int | None) -> list[int]:
    """Fail each trial of ``dead`` (``worker_died: why``), then re-queue it as a stale heartbeat's is; their numbers."""
    storage = study._storage
    failed = []
    for trial, why in dead:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):  # another worker swept it first
            storage.set_trial_user_attr(trial._trial_id, FAIL_REASON_ATTR, f"{WORKER_DIED}: {why}")
            if storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                failed.append(trial._trial_id)
    retry = RetryByTrialPolicy(max_retry)
    for trial_id in failed:
        retry(study, storage.get_trial(trial_id))
    return [storage.get_trial(trial_id).number for trial_id in failed]
