"""The study's best trial (or Pareto front): the one rule every command, the run's summary and the best model follow.

The best is taken among the search's own trials: complete, feasible (they meet the space's
``constraints``) and not verdict trials. A verdict trial re-trains a configuration the study
already holds, with other seeds and precisions; the best of those would be the luckiest seed
(its spread is what the verdict's table reports), not a configuration the search found.
Optuna's own ``study.best_trial`` (and optuna-dashboard's) counts every complete trial.
"""

from __future__ import annotations

import datetime

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import is_feasible, is_verdict_trial
from hpo._errors import UserError


def end_order(trial: FrozenTrial) -> tuple[datetime.datetime, int]:
    """Sorts trials in the order they ended (a trial not ended yet last; ties: by number)."""
    return trial.datetime_complete or datetime.datetime.max, trial.number


def _candidates(study: optuna.Study, ended_by: FrozenTrial | None = None) -> list[FrozenTrial]:
    return [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if is_feasible(t) and not is_verdict_trial(t) and (ended_by is None or end_order(t) <= end_order(ended_by))
    ]


def ranked_trials(study: optuna.Study, *, ended_by: FrozenTrial | None = None) -> list[FrozenTrial]:
    """A single-objective study's complete, feasible search trials, best first (ties: the earlier trial first);
    with ``ended_by``, only those that had ended when it did."""
    if len(study.directions) > 1:
        raise ValueError("ranked_trials needs a single-objective study: several objectives have a Pareto front")
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    return sorted(_candidates(study, ended_by), key=lambda t: (-t.value if maximize else t.value, t.number))


def _pareto_front(trials: list[FrozenTrial], directions: list[optuna.study.StudyDirection]) -> list[FrozenTrial]:
    """The trials no other trial dominates (at least as good in every objective, better in one)."""
    if not trials:
        return []
    signs = np.array([-1.0 if d == optuna.study.StudyDirection.MAXIMIZE else 1.0 for d in directions])
    costs = np.array([t.values for t in trials], dtype=float) * signs  # every objective minimised
    dominated = [
        bool(np.any(np.all(costs <= cost, axis=1) & np.any(costs < cost, axis=1))) for cost in costs
    ]
    return [t for t, beaten in zip(trials, dominated, strict=True) if not beaten]


def why_no_best(study: optuna.Study) -> str:
    """Why :func:`best_trials` is empty: ``none has completed yet``, or ``none meets the space's constraints``."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return "none meets the space's constraints" if any(not is_verdict_trial(t) for t in complete) else "none has completed yet"


def best_trials(study: optuna.Study, *, ended_by: FrozenTrial | None = None) -> list[FrozenTrial]:
    """The study's best trial as a one-item list, or its Pareto front (by trial number) with several objectives.

    Empty while no search trial has completed, or none meets the constraints. See the module for
    which trials count. With ``ended_by``, the best as it stood when that trial ended (trials that ended later left out).
    """
    if not isinstance(study, optuna.Study):  # a name given for the study: an AttributeError from deep inside
        raise UserError(f"best_trials takes a study, got a {type(study).__name__}; pass hpo.load(name, storage=...)")
    if len(study.directions) > 1:
        return sorted(_pareto_front(_candidates(study, ended_by), study.directions), key=lambda t: t.number)
    return ranked_trials(study, ended_by=ended_by)[:1]
