"""What optuna-dashboard shows of our studies: objective names, readable attributes, skipped trials marked.

- The study's metric names (``Study.set_metric_names``) are the space's objective names, so the
  dashboard labels its plots ``accuracy``, not "Objective 0".
- Nested user attributes (``hardware``, ``config``, ``metrics``...) stay nested in the storage,
  where the commands read them; the dashboard is served a view of the storage in which each
  leaf is a row of its own (``hardware.device_name``), instead of one JSON line thousands of
  pixels wide.
- A trial pruned for a reason of ours (a precision the machine cannot run, a diverged loss,
  out of memory) gets a note on its dashboard page that says so, above everything else.
- A single-objective study's best trial is the one every command names (:mod:`hpo._ranking`:
  never a verdict trial, never an infeasible one), not the storage's highest value. (A Pareto
  front the dashboard computes itself, over every trial.)
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial

if TYPE_CHECKING:
    from optuna.study._frozen import FrozenStudy

from hpo._attrs import SKIP_DETAIL_ATTR, skip_reason_of
from hpo._ranking import best_trials
from hpo.reporting._export import flatten
from hpo.study._outcomes import SKIP_NON_FINITE, SKIP_OOM, SKIP_UNSUPPORTED

# skip_reason -> the note's heading.
SKIP_HEADINGS = {
    SKIP_UNSUPPORTED: "Skipped: this machine cannot run the precision (not counted toward the budget)",
    SKIP_NON_FINITE: "Pruned: the loss diverged (NaN or inf)",
    SKIP_OOM: "Pruned: out of memory",
}


def name_objectives(study: optuna.Study, names: Sequence[str]) -> None:
    """Label the study's objectives with ``names`` (once; rewriting on every run would be a write per worker)."""
    if list(study.metric_names or []) != list(names):
        with warnings.catch_warnings():  # experimental since Optuna 3.2, and the dashboard's way to name objectives
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(names))


def note_skipped(study: optuna.Study, trial: FrozenTrial) -> None:
    """Put a note naming why on the dashboard page of a trial pruned for a reason of ours."""
    heading = SKIP_HEADINGS.get(skip_reason_of(trial))
    if heading is None:
        return
    detail = str(trial.user_attrs.get(SKIP_DETAIL_ATTR) or "")
    save_note_quietly(optuna.Trial(study, trial._trial_id), f"## {heading}\n\n{detail}\n")


def save_note_quietly(target: optuna.Study | optuna.Trial, markdown: str) -> None:
    """``target``'s note in optuna-dashboard, or nothing: a note is a courtesy, so neither a failed
    write nor optuna-dashboard's absence (an environment with only some of our dependencies, such
    as the GPU kit's) may fail the study or the verdict that writes it."""
    with contextlib.suppress(Exception):
        from optuna_dashboard import save_note

        save_note(target, markdown)


def _readable(attrs: dict[str, Any]) -> dict[str, Any]:
    return flatten(attrs)


def _trial(trial: FrozenTrial) -> FrozenTrial:
    shown = copy.copy(trial)
    shown.user_attrs = _readable(trial.user_attrs)
    return shown


def _study(study: FrozenStudy) -> FrozenStudy:
    shown = copy.copy(study)
    shown.user_attrs = _readable(study.user_attrs)
    return shown


class ReadableStorage(BaseStorage):
    """``storage`` as optuna-dashboard should see it: nested user attributes flattened to dotted keys.

    Every call goes to ``storage``; only what reads user attributes is reshaped on the way out.
    """

    def __init__(self, storage: BaseStorage) -> None:
        self._inner = storage
        # trial id -> (the trial as the storage last gave it, its readable copy). The page polls
        # every trial every few seconds; a cached storage hands back the very same object for a
        # trial that has not changed, so only new or changed trials are flattened again.
        self._shown: dict[int, tuple[FrozenTrial, FrozenTrial]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _readable_trial(self, trial: FrozenTrial) -> FrozenTrial:
        seen = self._shown.get(trial._trial_id)
        if seen is not None and seen[0] is trial:
            return seen[1]
        shown = _trial(trial)
        self._shown[trial._trial_id] = (trial, shown)
        return shown

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return _trial(self._inner.get_trial(trial_id))

    def get_all_trials(self, study_id: int, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        trials = self._inner.get_all_trials(study_id, deepcopy=deepcopy, states=states)
        return [self._readable_trial(t) if not deepcopy else _trial(t) for t in trials]

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        study = optuna.load_study(study_name=self._inner.get_study_name_from_id(study_id), storage=self._inner)
        best = best_trials(study)  # empty only where no search trial is complete and feasible: then the storage's
        return _trial(best[0] if best else self._inner.get_best_trial(study_id))

    def get_trial_user_attrs(self, trial_id: int) -> dict[str, Any]:
        return _readable(self._inner.get_trial_user_attrs(trial_id))

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return _readable(self._inner.get_study_user_attrs(study_id))

    def get_all_studies(self) -> list[FrozenStudy]:
        return [_study(s) for s in self._inner.get_all_studies()]


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: ReadableStorage, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._inner, name)(*args, **kwargs)

    method.__name__ = name
    return method


# The rest of BaseStorage's interface (writes, ids, names) goes straight through.
for _name in sorted(BaseStorage.__abstractmethods__ | {"get_n_trials", "get_trial_id_from_study_id_trial_number",
                                                       "get_trial_number_from_id", "get_trial_param", "get_trial_params",
                                                       "get_trial_system_attrs", "check_trial_is_updatable", "remove_session"}):
    if _name not in ReadableStorage.__dict__:
        setattr(ReadableStorage, _name, _delegate(_name))
ReadableStorage.__abstractmethods__ = frozenset()
