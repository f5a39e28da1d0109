"""Re-queueing a failed trial under its own retry policy, whichever worker fails it."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import optuna
from optuna.trial import FrozenTrial

from hpo._attrs import FAIL_REASON_ATTR, INTERRUPTED, retry_policy_of


def _stopped(trial: FrozenTrial | None) -> bool:
    return trial is not None and trial.user_attrs.get(FAIL_REASON_ATTR) == INTERRUPTED


def retry_left(trial: FrozenTrial, limit: int | None, trials: Iterable[FrozenTrial]) -> bool:
    """Whether the failed ``trial``'s chain may be retried once more under ``limit`` (``None``: no limit).

    A planned stop (SIGINT/SIGTERM: ``interrupted``, checkpointed) is always retried and spends none of the limit:
    a fourth preemption of one trial dropped it, while its run said it was re-queued. The limit counts the chain's
    other failures (a dead worker, a lost reason), ``trial``'s own included; ``trials`` holds its predecessors.
    """
    if limit is None or _stopped(trial):
        return True
    history = set(trial.system_attrs.get("retry_history", ()))
    if not history:  # a first attempt (most): no predecessor to look up among the study's trials
        return limit >= 1
    predecessors = {t.number: t for t in trials if t.number in history}
    return 1 + sum(not _stopped(predecessors.get(number)) for number in history) <= limit


class RetryByTrialPolicy:
    """Optuna's ``RetryHeartbeatStaleTrialCallback`` with the limit the failed trial's own worker ran under.

    Workers of one study may be started with different ``--max-retry``: the trial's (:func:`hpo._attrs.retry_policy_of`)
    decides, so that whether a trial is retried does not depend on which worker happened to find it failed.
    ``max_retry`` is the limit for a trial that recorded none; what it counts is :func:`retry_left`'s. The retry
    carries its predecessor's learning curve (its intermediate values), which a pruner compares at every step: without
    them the steps before the resumed checkpoint were missing from the trial that completed. Usable as an RDB
    storage's stale-trial callback.
    """

    def __init__(self, max_retry: int | None) -> None:
        self.max_retry = max_retry

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if not retry_left(trial, retry_policy_of(trial, self.max_retry), study.get_trials(deepcopy=False)):
            return
        # A copy: Optuna's callback appends to the trial's own retry_history list.
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=None, inherit_intermediate_values=True)(study, copy.deepcopy(trial))
