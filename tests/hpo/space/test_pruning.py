"""A retried trial is one trial to the pruner: decisions with a retry match those of the study never interrupted.

Each study is real Optuna on a SQLite file; the retry is made by the project's own policy (``RetryByTrialPolicy``,
inheriting the learning curve). Both studies share a name, so Hyperband assigns brackets by the same numbers.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpo.space import parse_search_space
from hpo.storage._retry_policy import RetryByTrialPolicy

# Each trial's accuracy at steps 1..9; trial "a" is the one interrupted (after step 2) in the second study.
_CURVES = {"a": [0.2, 0.25, 0.4, 0.95, 0.96, 0.97, 0.97, 0.98, 0.98], "b": [0.6, 0.7, 0.72, 0.73, 0.74, 0.75, 0.8, 0.81, 0.82],
           "c": [0.5, 0.55, 0.6, 0.6, 0.6, 0.61, 0.62, 0.63, 0.64], "d": [0.4, 0.45, 0.5, 0.66, 0.7, 0.71, 0.72, 0.73, 0.74],
           "e": [0.55, 0.65, 0.7, 0.71, 0.72, 0.73, 0.74, 0.75, 0.76]}
_PRUNERS = {
    "successive_halving": {"type": "successive_halving", "min_resource": 1, "reduction_factor": 2},
    "hyperband": {"type": "hyperband", "min_resource": 1, "max_resource": 9, "reduction_factor": 3},
}


def _study(path: Path, name: str, pruner: dict[str, object]) -> optuna.Study:
    space = parse_search_space({"params": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}}, "pruner": pruner})
    return optuna.create_study(storage=f"sqlite:///{path}", study_name=name, direction="maximize", pruner=space.build_pruner())


def _report(trial: optuna.Trial, name: str, steps: range, decisions: list[tuple[str, int, bool]]) -> bool:
    """Reports ``name``'s curve at ``steps``, recording each decision; whether the trial was pruned."""
    for step in steps:
        trial.report(_CURVES[name][step - 1], step)
        decisions.append((name, step, trial.should_prune()))
        if decisions[-1][2]:
            return True
    return False


def _finish(study: optuna.Study, trial: optuna.Trial, name: str, pruned: bool) -> None:
    study.tell(trial, state=TrialState.PRUNED) if pruned else study.tell(trial, _CURVES[name][-1])


def _run(study: optuna.Study, interrupt_a: bool) -> list[tuple[str, int, bool]]:
    decisions: list[tuple[str, int, bool]] = []
    trials = {name: study.ask() for name in _CURVES}  # numbered 0-4 in both studies: Hyperband's brackets agree
    _report(trials["a"], "a", range(1, 3), decisions)
    if interrupt_a:  # "a" stops after step 2 (its checkpoint) and is re-queued at once; the others report meanwhile
        study.tell(trials["a"], state=TrialState.FAIL)
        RetryByTrialPolicy(max_retry=3)(study, study.trials[0])
    for name in "bcde":
        _finish(study, trials[name], name, _report(trials[name], name, range(1, 10), decisions))
    if interrupt_a:
        trials["a"] = study.ask()
        assert trials["a"].number == 5 and study.trials[5].intermediate_values == {1: 0.2, 2: 0.25}
    _finish(study, trials["a"], "a", _report(trials["a"], "a", range(3, 10), decisions))
    return decisions


# Study names (Hyperband: crc32 of name and number) where the retry (number 5) shares every trial's bracket, and where
# its predecessor's bracket is the others' while its own number's is not.
@pytest.mark.parametrize(("pruner", "name"), [("successive_halving", "chains"), ("hyperband", "chains-26"), ("hyperband", "chains-39")])
def test_a_retried_trial_is_pruned_as_if_it_was_never_interrupted(tmp_path: Path, pruner: str, name: str) -> None:
    uninterrupted = _run(_study(tmp_path / "once.db", name, _PRUNERS[pruner]), interrupt_a=False)
    with_retry = _run(_study(tmp_path / "retried.db", name, _PRUNERS[pruner]), interrupt_a=True)
    assert with_retry == uninterrupted
    assert any(pruned for _, _, pruned in uninterrupted) and not all(pruned for _, _, pruned in uninterrupted)
