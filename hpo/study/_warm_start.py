"""Warm start: the best trials of an earlier study in the same storage run first in this one (before the fp32 baseline)."""

from __future__ import annotations

import sys
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from hpo._errors import UserError, bounded_list
from hpo._ranking import best_trials, ranked_trials, why_no_best
from hpo.space._fixes import as_choice
from hpo.space._space import SearchSpace
from hpo.storage._inspect import open_existing_storage
from hpo.storage._storage import mask_url

DEFAULT_WARM_START_TRIALS = 3


def load_warm_start_source(url: str, source: str, study_name: str) -> optuna.Study:
    """The earlier study named ``source`` in the storage at ``url``; checked before anything is written."""
    if source == study_name:
        raise UserError(f"--warm-start {source!r} names the study being run; pass an earlier study's name")
    try:
        storage = open_existing_storage(url)
    except UserError as err:  # a new study's storage, not made yet: the problem is where the earlier study is
        raise UserError(f"--warm-start {source!r} reads the earlier study from this run's --storage, which holds none "
                        f"({str(err).split(';')[0]}); run with the --storage that holds it") from None
    names = optuna.get_all_study_names(storage)
    if source not in names:
        raise UserError(f"--warm-start: no study {source!r} in {mask_url(url)}; studies found: {bounded_list(sorted(names))}")
    return optuna.load_study(study_name=source, storage=storage)


def _best(source: optuna.Study, n: int) -> list[FrozenTrial]:
    """Up to ``n`` best search trials: by value, or the Pareto front's first (by number) with several objectives."""
    return (ranked_trials(source) if len(source.directions) == 1 else best_trials(source))[:n]


def fitting_params(trial: FrozenTrial, space: SearchSpace, source_name: str) -> dict[str, Any] | None:
    """The trial's values of the space's searched params, or ``None`` (with a one-line notice) when one does not fit.

    Params the space no longer searches are left out; params the trial lacks are sampled.
    A value outside the space skips the trial: it is never moved into the range.
    """
    params = {}
    for name, value in trial.params.items():
        if name not in space.params:
            continue
        param = space.params[name]
        value = as_choice(name, param, value)  # fp32 under another name (none, no) is the space's fp32
        problem = param.problem_with(value, within="the space's range")
        if problem:
            _notice(f"trial {trial.number} of {source_name!r} skipped: {name}={value!r} {problem}")
            return None
        params[name] = value
    if not params:
        _notice(f"trial {trial.number} of {source_name!r} skipped: it shares no searched parameter with this space")
        return None
    return params


def warm_start_configurations(space: SearchSpace, source: optuna.Study, n: int) -> list[tuple[str, dict[str, Any]]]:
    """``(origin, params)`` of ``source``'s ``n`` best trials that fit ``space``, for :func:`open_study`'s ``known_good``."""
    best = _best(source, n)
    if not best:
        _notice(f"{source.study_name!r} has no best trial ({why_no_best(source)}); nothing enqueued")
    picked = [(t, fitting_params(t, space, source.study_name)) for t in best]
    # As written, as the space's enqueue entries are: a --fix pins (through the sampler) what a trial leaves to be sampled,
    # and one that set another value waits for a run without that fix, never rewritten into a configuration it is not.
    return [(f"study:{source.study_name}:{t.number}", params) for t, params in picked if params is not None]


def _notice(message: str) -> None:
    print(f"warm start: {message}", file=sys.stderr, flush=True)
