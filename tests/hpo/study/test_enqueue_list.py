"""A space's ``enqueue:`` list may grow while its study runs: a known-good configuration added to the YAML is queued once.

Adding an entry was refused ("a different search space (enqueue was None, now [...])"): a user had no way to add a known
configuration to a running study. And entries were known by their index: one inserted first took the origin of the
entry already run (space:0, never queued), and that entry, now space:1, was queued and trained a second time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

import hpo
from hpo import create_storage, open_study, parse_search_space
from trial_executor import demo_dataset

SPACE = {
    "params": {"learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True},
               "batch_size": {"type": "categorical", "choices": [8, 16]}},
    "fixed": {"model": "tiny-bert", "max_steps": 2, "eval_every": 0, "max_length": 32},
}
DATA = demo_dataset(n_train=50, n_valid=10)
A, B = {"learning_rate": 1e-3, "batch_size": 8}, {"learning_rate": 2e-3}


def _open(storage: optuna.storages.BaseStorage, entries: list[dict[str, Any]] | None) -> optuna.Study:
    space = parse_search_space({**SPACE, **({"enqueue": entries} if entries is not None else {})})
    return open_study(storage, "e", space, DATA, 0)


def _run_waiting(study: optuna.Study) -> None:
    for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        trial = study.ask()
        study.tell(trial, 0.5)


def _enqueued(study: optuna.Study) -> list[dict[str, Any]]:
    return [t.system_attrs["fixed_params"] for t in study.get_trials(deepcopy=False) if "enqueued_from" in t.user_attrs]


@pytest.mark.parametrize("before", [None, [A]], ids=["no list", "a list"])
def test_an_entry_added_to_a_running_study_is_queued_once_and_none_run_twice(tmp_path: Path, before: list[dict[str, Any]] | None) -> None:
    storage = create_storage(f"sqlite:///{tmp_path / 'e.db'}")
    study = _open(storage, before)
    _run_waiting(study)
    study = _open(storage, [B, *(before or [])])  # the new one first: it is not the first's origin
    _open(storage, [B, *(before or [])])  # a rerun, or a second worker
    assert _enqueued(study) == [*(before or []), B]
    assert study.user_attrs["search_space"]["enqueue"] == [B, *(before or [])]  # a run without --space enqueues these
    _run_waiting(study)
    _open(storage, [B, *(before or [])])
    assert _enqueued(study) == [*(before or []), B] and all(t.state == TrialState.COMPLETE for t in study.get_trials())


def test_an_edited_entry_is_a_new_configuration(tmp_path: Path) -> None:
    storage = create_storage(f"sqlite:///{tmp_path / 'e.db'}")
    _run_waiting(_open(storage, [A]))
    study = _open(storage, [{**A, "batch_size": 16}])
    assert _enqueued(study) == [A, {**A, "batch_size": 16}]


def test_an_entry_a_study_ran_under_its_index_is_not_queued_again(tmp_path: Path) -> None:
    """A study an earlier version ran recorded its entries as space:<index>."""
    storage = create_storage(f"sqlite:///{tmp_path / 'e.db'}")
    study = _open(storage, None)
    study.enqueue_trial(A, user_attrs={"enqueued_from": "space:0"})
    _run_waiting(study)
    study = _open(storage, [A, B])
    assert _enqueued(study) == [A, B]


def test_the_rest_of_the_space_is_still_checked(tmp_path: Path) -> None:
    storage = create_storage(f"sqlite:///{tmp_path / 'e.db'}")
    _open(storage, [A])
    wider = parse_search_space({**SPACE, "params": {**SPACE["params"], "batch_size": {"type": "categorical", "choices": [8, 16, 32]}},
                                "enqueue": [A, B]})
    with pytest.raises(hpo.UserError, match=r"different search space \(params\.batch_size\.choices was \[8, 16\], now \[8, 16, 32\]\)"):
        open_study(storage, "e", wider, DATA, 0)


def test_a_params_default_may_change_between_runs_of_a_study(tmp_path: Path) -> None:
    """A default only picks the fp32 baseline's value, and the baseline is queued once: editing it in a running study's
    YAML was refused as another space (params.learning_rate.default was 0.001, now 0.0015)."""
    storage = create_storage(f"sqlite:///{tmp_path / 'e.db'}")
    searched = {**SPACE["params"], "fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}}
    first = {**SPACE, "params": {**searched, "learning_rate": {**searched["learning_rate"], "default": 1e-3}}}
    study = open_study(storage, "e", parse_search_space(first), DATA, 0)
    _run_waiting(study)
    edited = {**first, "params": {**first["params"], "learning_rate": {**searched["learning_rate"], "default": 1.5e-3}}}
    study = open_study(storage, "e", parse_search_space(edited), DATA, 0)
    assert [t.system_attrs["fixed_params"]["learning_rate"] for t in study.get_trials()] == [1e-3]  # the baseline as queued, once
    narrowed = {**edited, "params": {**edited["params"], "learning_rate": {**searched["learning_rate"], "high": 1.5e-3}}}
    with pytest.raises(hpo.UserError, match=r"params\.learning_rate\.high was 0\.002, now 0\.0015"):
        open_study(storage, "e", parse_search_space(narrowed), DATA, 0)


def test_the_sampler_may_change_between_runs_of_a_study(tmp_path: Path) -> None:
    """Each run builds its sampler: tuning TPE once a few trials are in was refused (sampler was None, now {...})."""
    storage = create_storage(f"sqlite:///{tmp_path / 'e.db'}")
    _run_waiting(_open(storage, [A]))
    random = parse_search_space({**SPACE, "sampler": {"type": "random"}})
    study = open_study(storage, "e", random, DATA, 0)
    assert isinstance(study.sampler.sampler_of(study.trials[0]), optuna.samplers.RandomSampler)
    assert study.user_attrs["search_space"]["sampler"] == {"type": "random"}
