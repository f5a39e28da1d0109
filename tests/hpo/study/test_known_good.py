"""A known-good configuration (a space's ``enqueue:`` entry, a warm start's trial) that leaves the precision to the
sampler trains once in every study, whatever precision the sampler first draws for it on this machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
from conftest import SMALL_SPACE
from optuna.trial import TrialState

import hpo
from hpo._attrs import skip_reason_of
from hpo.study import counts_toward_budget, run_to_budget
from hpo.study._known_good import space_origin
from trial_executor import demo_dataset

ENTRIES = [{"learning_rate": 6e-4}, {"learning_rate": 9e-4}, {"learning_rate": 1.5e-3}]


def test_an_entry_that_draws_a_precision_this_machine_cannot_run_is_queued_again_and_trains(tmp_path: Path) -> None:
    # fp32 or tf32, half and half, for each entry: tf32 cannot run on a CPU. Before, such an entry was skipped yet its
    # origin spent, so it never trained (here, 7 times in 8 at least one of the three entries).
    space = {**SMALL_SPACE, "params": {**SMALL_SPACE["params"], "fp_precision": {"type": "categorical", "choices": ["fp32", "tf32"]}},
             "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}, "enqueue": ENTRIES}
    storage = f"sqlite:///{tmp_path / 'k.db'}"
    study = hpo.optimize(space, demo_dataset(n_train=64, n_valid=16, seed=1), storage=storage, study_name="k",
                         n_trials=len(ENTRIES) + 1, device="cpu", artifact_store=None)
    trials = study.get_trials()
    trained = {t.user_attrs.get("enqueued_from"): t.params["learning_rate"] for t in trials if t.state == TrialState.COMPLETE}
    origins = [space_origin(entry) for entry in ENTRIES]
    assert {origin: trained.get(origin) for origin in origins} == {
        origin: entry["learning_rate"] for origin, entry in zip(origins, ENTRIES, strict=True)}
    skipped = [t for t in trials if t.state == TrialState.PRUNED]
    assert all(skip_reason_of(t) == "unsupported_precision" and t.params["fp_precision"] == "tf32" for t in skipped)
    assert sum(counts_toward_budget(t) for t in trials) == len(ENTRIES) + 1  # the baseline too; no skip counted
    assert not [t for t in trials if t.state == TrialState.WAITING]


def _first_draw_unsupported() -> Callable[[optuna.Trial], float]:
    drawn: list[str] = []

    def objective(trial: optuna.Trial) -> float:
        learning_rate = trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True)
        drawn.append(trial.suggest_categorical("fp_precision", ["fp32", "tf32"]))
        if len(drawn) == 1:  # the machine could not run what was drawn first, as hpo's objective records it
            trial.set_user_attr("skip_reason", "unsupported_precision")
            raise optuna.TrialPruned("tf32 unsupported: no CUDA device")
        return learning_rate
    return objective


def test_the_entry_is_queued_once_per_skip_and_its_copy_is_no_duplicate(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'd.db'}", study_name="d", direction="maximize")
    study.enqueue_trial({"learning_rate": 3e-3}, user_attrs={"enqueued_from": "space:0"})
    study.enqueue_trial({"learning_rate": 1e-3, "fp_precision": "tf32"}, user_attrs={"enqueued_from": "space:1"})
    objective = _first_draw_unsupported()
    run_to_budget(study, objective, n_trials=2)
    trials = study.get_trials()
    # Trial 0 drew a precision it could not run: queued again as trial 2 (after space:1, already waiting), which trains.
    assert [(t.state, t.user_attrs.get("enqueued_from"), t.params["learning_rate"]) for t in trials] == [
        (TrialState.PRUNED, "space:0", 3e-3), (TrialState.COMPLETE, "space:1", 1e-3), (TrialState.COMPLETE, "space:0", 3e-3)]
    assert trials[2].system_attrs["redraw_of"] == 0 and sum(counts_toward_budget(t) for t in trials) == 2
    # An entry that sets the precision itself asked for what it got: skipped, it is not queued again.
    study.enqueue_trial({"learning_rate": 2e-3, "fp_precision": "tf32"}, user_attrs={"enqueued_from": "space:2"})
    objective = _first_draw_unsupported()
    run_to_budget(study, objective, n_trials=3)
    later = study.get_trials()[3:]
    assert [(t.user_attrs.get("enqueued_from"), skip_reason_of(t)) for t in later] == [("space:2", "unsupported_precision"), (None, None)]
