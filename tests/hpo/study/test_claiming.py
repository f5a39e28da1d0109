"""Which waiting trials a worker claims (hpo.study._verdict._ClaimingStorage): a budget worker never a verdict trial
nor, in a --fix run, one that says otherwise; and every worker's sweeps still see every waiting retry."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import optuna
from conftest import SMALL_SPACE
from optuna.trial import FrozenTrial, TrialState

import hpo
from hpo._attrs import VERDICT_TRIAL_ATTR
from hpo.reporting._run_lines import run_summary
from hpo.study._study import _requeue_lost_retries
from hpo.study._verdict import _claiming, for_the_budget
from trial_executor import TextClassificationData, demo_dataset


def _data() -> TextClassificationData:
    return demo_dataset(n_train=64, n_valid=16, seed=1)


def test_a_waiting_retry_hidden_from_a_workers_claims_is_not_taken_for_a_lost_one() -> None:
    """A budget worker does not claim waiting verdict trials, nor a verdict worker the budget's; their sweeps hid those
    waiting retries too, and re-queued the failed trials behind them a second time once the grace period had passed."""
    long_ago = datetime.now() - timedelta(hours=1)
    study = optuna.create_study()
    for verdict in ({"of_trial": 0, "precision": "bf16", "seed": 0, "seed_index": 0}, None):
        attrs = {VERDICT_TRIAL_ATTR: verdict} if verdict else {}
        failed = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={**attrs, "fail_reason": "interrupted"})
        failed.datetime_start = failed.datetime_complete = long_ago  # its re-queue is long overdue, if lost
        study.add_trial(failed)
        number = len(study.trials) - 1
        study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, user_attrs=attrs,
                                                  system_attrs={"failed_trial": number, "retry_history": [number]}))

    def a_verdicts(trial: FrozenTrial) -> bool:
        return VERDICT_TRIAL_ATTR in trial.user_attrs

    for view in (for_the_budget(study, {}), _claiming(study, a_verdicts, may_create=False)):  # a budget's, a verdict's worker
        _requeue_lost_retries(view, max_retry=3)
    assert len(study.trials) == 4  # nothing re-queued a second time


def test_a_run_with_a_fix_leaves_waiting_trials_that_say_otherwise_for_a_run_without(tmp_path: Path) -> None:
    tiny = {**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
            "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}
    common = {"storage": f"sqlite:///{tmp_path / 'w.db'}", "study_name": "w", "device": "cpu", "artifact_store": None}
    study = hpo.optimize(tiny, _data(), n_trials=1, **common)  # the fp32 baseline
    study.enqueue_trial({"fp_precision": "fp32"})  # waiting, as an earlier run's retry or a known-good configuration
    hpo.optimize(tiny, _data(), n_trials=2, fix=["fp_precision=bf16"], **common)
    summary = run_summary(hpo.load("w", storage=common["storage"]), common["storage"], 2, ["accuracy"])
    assert "\nWaiting in the queue: trial 1 (a run whose --fix allows them, or a larger --n-trials, trains them)" in summary
    trials = hpo.load("w", storage=common["storage"]).trials
    assert [(t.state, {**t.params, **t.system_attrs.get("fixed_params", {})}["fp_precision"]) for t in trials] == [
        (TrialState.COMPLETE, "fp32"), (TrialState.WAITING, "fp32"), (TrialState.COMPLETE, "bf16")]
    hpo.optimize(tiny, _data(), n_trials=3, **common)  # without the fix, it is taken
    assert [t.state for t in hpo.load("w", storage=common["storage"]).trials] == [TrialState.COMPLETE] * 3
    # fp32 under another of its names is no other value.
    aliased = optuna.create_study()
    for precision in ("fp32", "bf16"):
        aliased.enqueue_trial({"fp_precision": precision})
    claimed = for_the_budget(aliased, {"fp_precision": "none"}).ask()
    assert claimed.number == 0 and claimed.suggest_categorical("fp_precision", ["none", "fp32", "bf16"]) == "fp32"
