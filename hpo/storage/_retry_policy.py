"""Re-queueing a failed trial under its own retry policy, whichever worker fails it."""

from __future__ import annotations

import copy

import optuna
from optuna.trial import FrozenTrial

from hpo._attrs import retry_policy_of


class RetryByTrialPolicy:
    """Optuna's ``RetryHeartbeatStaleTrialCallback`` with the limit the failed trial's own worker ran under.

    Workers of one study may be started with different ``--max-retry``: the trial's (:func:`hpo._attrs.retry_policy_of`)
    decides, so that whether a trial is retried does not depend on which worker happened to find it failed.
    ``max_retry`` is the limit for a trial that recorded none. Usable as an RDB storage's stale-trial callback.
    """

    def __init__(self, max_retry: int | None) -> None:
        self.max_retry = max_retry

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        limit = retry_policy_of(trial, self.max_retry)
        # A copy: Optuna's callback appends to the trial's own retry_history list.
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=limit)(study, copy.deepcopy(trial))
