"""A study's trials run with the caller's objects left out of the collections between trials, and only while they run."""

from __future__ import annotations

import gc
from pathlib import Path

import optuna

from hpo import create_storage, make_objective, open_study, parse_search_space, run_to_budget
from trial_executor import demo_dataset


def test_trials_run_with_the_heap_before_them_frozen_and_the_callers_collector_is_whole_after(tmp_path: Path) -> None:
    data = demo_dataset(n_train=64, n_valid=16, seed=1)
    space = parse_search_space({"params": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True}},
                                "fixed": {"model": "tiny-bert", "batch_size": 16, "max_steps": 2, "eval_every": 0}})
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'm.db'}"), "m", space, data, seed=0)
    objective = make_objective(space, data, base_seed=0, device="cpu")
    frozen_while_training: list[int] = []

    def observed(trial: optuna.Trial) -> float:
        frozen_while_training.append(gc.get_freeze_count())
        return objective(trial)

    run_to_budget(study, observed, 2)
    assert len(frozen_while_training) == 2 and min(frozen_while_training) > 0
    assert gc.get_freeze_count() == 0
