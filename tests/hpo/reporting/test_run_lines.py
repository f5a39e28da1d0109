"""A run's closing line after a stop signal says which trials it interrupted, and never claims one it did not."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from hpo.reporting._run_lines import stopped_line
from hpo.study._outcomes import INTERRUPTED, was_interrupted

PROG = "python -m hpo.run"


def _failed(reason: str) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"fail_reason": reason})


def test_only_a_trial_failed_by_the_stop_signal_counts_as_interrupted() -> None:
    assert was_interrupted(_failed(INTERRUPTED))
    assert not was_interrupted(_failed("worker_died: exit -9"))
    assert not was_interrupted(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.5))


def test_the_stopped_line_names_the_interrupted_trials_or_says_there_were_none() -> None:
    rerun = ": rerun the same command to resume the study"
    assert stopped_line(PROG, [3]) == f"{PROG}: stopped by a signal; trial 3 was checkpointed and re-queued{rerun}"
    assert stopped_line(PROG, [7, 4]) == f"{PROG}: stopped by a signal; trials 4, 7 were checkpointed and re-queued{rerun}"
    # Stopped after a trial ended and before the next began: nothing was checkpointed, and the line says so.
    none = stopped_line(PROG, [])
    assert none == f"{PROG}: stopped by a signal between trials, none interrupted{rerun}" and "checkpointed" not in none


def test_a_majority_class_trial_line_names_both_causes() -> None:
    from hpo._attrs import MAJORITY_CLASS_ATTR
    from hpo.reporting._run_lines import trial_line

    # Seen on TREC with MiniLM: one epoch at the bottom of the range (1.3e-5) never left the majority class.
    trial = optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.11, user_attrs={MAJORITY_CLASS_ATTR: True})
    line = trial_line(trial, ["accuracy"])
    assert "(majority class: learned nothing; the learning rate may be too high, or the training too short for it)" in line
