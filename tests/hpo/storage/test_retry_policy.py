"""The retry policy (hpo.storage._retry_policy) on real Optuna studies: what a retry carries and what spends the limit."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from hpo._attrs import FAIL_REASON_ATTR, INTERRUPTED
from hpo.storage import create_storage
from hpo.storage._retry_policy import RetryByTrialPolicy

X = {"x": optuna.distributions.FloatDistribution(0, 1)}


def _fail_latest(study: optuna.Study, reason: str, steps: tuple[int, ...] = ()) -> optuna.trial.FrozenTrial:
    """The next trial (the waiting retry, if any) run, reported at ``steps``, failed with ``reason`` and retried by the policy."""
    trial = study.ask(X)
    for step in steps:
        trial.report(step / 100, step)
    trial.set_user_attr(FAIL_REASON_ATTR, reason)
    study.tell(trial, state=TrialState.FAIL)
    frozen = study._storage.get_trial(trial._trial_id)
    RetryByTrialPolicy(max_retry=1)(study, frozen)
    return frozen


def test_planned_stops_spend_no_retry_and_a_retry_carries_its_learning_curve(tmp_path: Path) -> None:
    """A fourth SIGTERM of one trial (--max-retry 3) dropped it while its run said it was re-queued; and a retry lacked
    its predecessor's evaluations, so a median pruner compared it at none of the steps before its checkpoint."""
    study = optuna.create_study(storage=create_storage(f"sqlite:///{tmp_path / 'r.db'}"), study_name="r")
    first = _fail_latest(study, INTERRUPTED, steps=(10, 20))
    for _ in range(3):  # stopped again and again, each time re-queued: under --max-retry 1 too
        _fail_latest(study, INTERRUPTED)
    waiting = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert len(waiting) == 1 and waiting[0].system_attrs["retry_history"] == [0, 1, 2, 3]
    assert waiting[0].intermediate_values == first.intermediate_values == {10: 0.1, 20: 0.2}
    _fail_latest(study, "worker_died: its process exited")  # the chain's first crash: the one retry --max-retry 1 allows
    assert [t.state for t in study.get_trials()][-1] == TrialState.WAITING
    _fail_latest(study, "worker_died: its process exited")  # its second: no more
    assert TrialState.WAITING not in [t.state for t in study.get_trials()]
