"""A study remembers its --seed: trial k of every run trains with seed + k, one origin for all of them.

A study extended without the first run's --seed (or with another) trained its later trials from another origin,
and could repeat a seed: --seed 5 gave trial 0 seed 5, a rerun's default --seed 0 gave trial 5 seed 5 again.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from conftest import SMALL_SPACE

import hpo
from hpo._attrs import CONFIG_ATTR
from trial_executor import demo_dataset

DATA = demo_dataset(n_train=64, n_valid=16)
# Two steps, no evaluation before the end: a trial in a second.
QUICK = {**SMALL_SPACE, "params": {"learning_rate": SMALL_SPACE["params"]["learning_rate"]},
         "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}


def _open(url: str, seed: int | None) -> optuna.Study:
    return hpo.open_study(hpo.create_storage(url), "s", hpo.parse_search_space(QUICK), DATA, seed=seed)


def test_a_run_with_another_seed_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _open(url, 5)
    before = optuna.load_study(study_name="s", storage=url).user_attrs
    with pytest.raises(hpo.UserError, match=r"^study 's' trains trial k with seed 5 \+ k \(it was made with --seed 5\), "
                                            r"and this run has --seed 0; rerun with --seed 5 \(or without --seed\), "
                                            r"or pick a new --study-name$"):
        _open(url, 0)
    assert optuna.load_study(study_name="s", storage=url).user_attrs == before


def test_a_run_without_a_seed_extends_the_study_on_its_own(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    hpo.optimize(QUICK, DATA, storage=url, study_name="s", n_trials=1, seed=5, device="cpu", artifact_store=None)
    hpo.optimize(QUICK, DATA, storage=url, study_name="s", n_trials=2, device="cpu", artifact_store=None)
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert [t.user_attrs[CONFIG_ATTR]["seed"] for t in trials] == [5, 6]


def test_a_new_study_without_a_seed_takes_0_and_stores_it(tmp_path: Path) -> None:
    assert _open(f"sqlite:///{tmp_path / 's.db'}", None).user_attrs["seed"] == 0


def test_a_study_made_before_the_seed_was_stored_takes_its_first_trials_seed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    hpo.optimize(QUICK, DATA, storage=url, study_name="s", n_trials=2, seed=7, device="cpu", artifact_store=None)
    study = optuna.load_study(study_name="s", storage=url)
    study._storage.set_study_user_attr(study._study_id, "seed", None)  # as an earlier version left it: no seed stored
    assert _open(url, None).user_attrs["seed"] == 7
    with pytest.raises(hpo.UserError, match=r"made with --seed 7\), and this run has --seed 0"):
        _open(url, 0)
