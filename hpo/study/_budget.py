"""The study's budget: which trials count toward ``--n-trials``, and a slot of it for each trial a worker starts."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import BUDGET_SLOT_ATTR, is_verdict_trial
from hpo._ranking import end_order
from hpo.study._lock import study_lock
from hpo.study._outcomes import counted_state

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """Finished trials count; instant skips of a precision this machine cannot run, placeholders that never ran and
    verdict trials do not."""
    return counted_state(trial) in ("COMPLETE", "PRUNED") and not is_verdict_trial(trial)


def finished_count(study: optuna.Study) -> int:
    return sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False, states=FINISHED))


def finished_when(trials: list[FrozenTrial], trial: FrozenTrial) -> int:
    """How many of ``trials`` counted toward the budget when ``trial`` ended (it included): the study's position then."""
    return sum(counts_toward_budget(t) and end_order(t) <= end_order(trial) for t in trials)


def budget_used(study: optuna.Study) -> tuple[int, list[FrozenTrial]]:
    """Finished trials counting toward the budget, and the running trials holding a slot of it (a verdict trial, outside
    the budget, holds none: its runner takes slots of a budget of its own)."""
    return budget_of(study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING)))


def budget_of(trials: list[FrozenTrial]) -> tuple[int, list[FrozenTrial]]:
    """:func:`budget_used` of ``trials`` (the study's finished and running trials)."""
    held = [t for t in trials
            if t.state == TrialState.RUNNING and t.user_attrs.get(BUDGET_SLOT_ATTR) == t.number and not is_verdict_trial(t)]
    return sum(counts_toward_budget(t) for t in trials), held


def take_slot(study: optuna.Study, trial: optuna.Trial, n_trials: int) -> bool:
    """Give ``trial`` a slot of the budget unless finished and running trials hold them all, so that several workers never
    start more trials than the budget has left: checked and taken under the study's lock, or, where no lock reaches (a
    ``grpc://`` proxy's workers), claimed first and counted after (:func:`_claim_then_count`)."""
    with study_lock(study._storage, study.study_name) as locked:
        if not locked:
            return _claim_then_count(study, trial, n_trials)
        finished, held = budget_used(study)
        # Ours already: an earlier attempt wrote it, then lost its lock's connection (the lock released early) while another
        # worker may have taken the last slot meanwhile: so the slot is counted again under this lock, without ours, given back if over.
        mine = trial.user_attrs.get(BUDGET_SLOT_ATTR) == trial.number
        if finished + len(held) - mine >= n_trials:
            if mine:
                trial.set_user_attr(BUDGET_SLOT_ATTR, None)
            return False
        if not mine:
            trial.set_user_attr(BUDGET_SLOT_ATTR, trial.number)
        return True


def _claim_then_count(study: optuna.Study, trial: optuna.Trial, n_trials: int) -> bool:
    """A slot without a lock: write the claim, then count every claim and give ours back if the budget is over.

    Of the workers racing for the last slots, the one whose claim was written last reads every other
    claim that still stands, so the claims kept never exceed the budget. Two that read each other's
    claims may both give theirs back: each then tries again, as after losing a slot.
    """
    trial.set_user_attr(BUDGET_SLOT_ATTR, trial.number)
    finished, held = budget_used(study)
    others = sum(t.number != trial.number for t in held)  # ours counted once, whether or not the read shows it
    if finished + others + 1 > n_trials:
        trial.set_user_attr(BUDGET_SLOT_ATTR, None)
        return False
    return True
