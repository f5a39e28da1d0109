"""The study's best trial (or Pareto front): the one rule every command, the run's summary and the best model follow.

The best is taken among the search's own trials: complete, feasible (they meet the space's
``constraints``) and not verdict trials. A verdict trial re-trains a configuration the study
already holds, with other seeds and precisions; the best of those would be the luckiest seed
(its spread is what the verdict's table reports), not a configuration the search found.
Optuna's own ``study.best_trial`` (and optuna-dashboard's) counts every complete trial.
"""

from __future__ import annotations

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import is_feasible, is_verdict_trial
from hpo._errors import UserError


def _candidates(study: optuna.Study) -> list[FrozenTrial]:
    return [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if is_feasible(t) and not is_verdict_trial(t)
    ]


def ranked_trials(study: optuna.Study) -> list[FrozenTrial]:
    """A single-objective study's complete, feasible search trials, best first (ties: the earlier trial first)."""
    if len(study.directions) > 1:
        raise ValueError("ranked_trials needs a single-objective study: several objectives have a Pareto front")
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    return sorted(_candidates(study), key=lambda t: (-t.value if maximize else t.value, t.number))


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


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's best trial as a one-item list, or its Pareto front (by trial number) with several objectives.

    Empty while no search trial has completed, or none meets the constraints. See the module for
    which trials count.
    """
    if not isinstance(study, optuna.Study):  # a name given for the study: an AttributeError from deep inside
        raise UserError(f"best_trials takes a study, got a {type(study).__name__}; pass hpo.load(name, storage=...)")
    if len(study.directions) > 1:
        return sorted(_pareto_front(_candidates(study), study.directions), key=lambda t: t.number)
    return ranked_trials(study)[:1]
