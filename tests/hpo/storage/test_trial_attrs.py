"""A trial's user attrs written together (hpo.storage.set_user_attrs): Optuna's rows, one commit, all or none."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy
from optuna.storages._rdb import models

from hpo.storage import create_storage, set_user_attrs
from hpo.storage._retrying_storage import RetryingStorage
from hpo.study._verdict import for_the_budget

# What a trial's result holds: numbers, nested dicts, None, text beyond ASCII, a value already stored being replaced.
ATTRS: dict[str, Any] = {
    "metrics": {"accuracy": 0.875, "loss": 0.31}, "throughput_samples_per_s": 1234.5, "steps": 20, "note": "naïve — 日本",
    "compile_refused": None, "flags": [True, False], "nan_value": math.nan, "replaced": "new",
    **{f"attr_{i}": i * 0.5 for i in range(30)},
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> RetryingStorage:
    url = request.getfixturevalue("pg_database") if request.param == "postgres" else f"sqlite:///{tmp_path / 'attrs.db'}"
    return create_storage(url)  # type: ignore[return-value]


@pytest.fixture
def study(storage: RetryingStorage) -> optuna.Study:
    return optuna.create_study(storage=storage, study_name="attrs")


def _stored_rows(storage: RetryingStorage, trial_id: int) -> dict[str, str]:
    table = models.TrialUserAttributeModel.__table__
    with storage.engine.connect() as connection:
        rows = connection.execute(sqlalchemy.select(table.c.key, table.c.value_json).where(table.c.trial_id == trial_id))
        return {key: value for key, value in rows}


def _as_json(attrs: dict[str, Any]) -> str:
    return json.dumps(attrs, sort_keys=True)  # NaN equals NaN here, as the stored text does


def _commits(storage: RetryingStorage) -> list[int]:
    """A list that grows by one at every COMMIT the storage's engine sends from now on."""
    seen: list[int] = []
    sqlalchemy.event.listen(storage.engine, "commit", lambda connection: seen.append(1))
    return seen


def test_the_attrs_are_stored_as_optunas_own_writes_store_them(storage: RetryingStorage, study: optuna.Study) -> None:
    ours, optunas = study.ask(), study.ask()
    for trial in (ours, optunas):
        trial.set_user_attr("replaced", "old")
    set_user_attrs(ours, ATTRS)
    for key, value in ATTRS.items():
        optunas.set_user_attr(key, value)
    assert _stored_rows(storage, ours._trial_id) == _stored_rows(storage, optunas._trial_id)
    stored = storage.get_trial(ours._trial_id).user_attrs
    assert _as_json(stored) == _as_json(storage.get_trial(optunas._trial_id).user_attrs)
    assert stored["note"] == "naïve — 日本" and math.isnan(stored["nan_value"]) and stored["replaced"] == "new"
    assert _as_json(ours.user_attrs) == _as_json(optunas.user_attrs)  # the trial's cached copy sees them too


def test_all_attrs_go_in_one_commit(storage: RetryingStorage, study: optuna.Study) -> None:
    trial = study.ask()
    commits = _commits(storage)
    set_user_attrs(trial, ATTRS)
    assert len(commits) == 1
    assert _as_json(storage.get_trial(trial._trial_id).user_attrs) == _as_json(ATTRS)


def test_a_value_that_is_not_json_stores_none_of_them(storage: RetryingStorage, study: optuna.Study) -> None:
    trial = study.ask()
    with pytest.raises(TypeError):
        set_user_attrs(trial, {"first": 1, "not_json": object(), "last": 2})
    assert storage.get_trial(trial._trial_id).user_attrs == {} == trial.user_attrs


def test_a_finished_trial_is_refused_and_keeps_its_attrs(storage: RetryingStorage, study: optuna.Study) -> None:
    trial = study.ask()
    trial.set_user_attr("kept", 1)
    study.tell(trial, 0.5)
    with pytest.raises(RuntimeError, match="finished"):
        set_user_attrs(trial, {"kept": 2, "late": 3})
    assert storage.get_trial(trial._trial_id).user_attrs == {"kept": 1}


def test_behind_a_verdict_workers_wrapper_the_attrs_still_go_in_one_commit(storage: RetryingStorage, study: optuna.Study) -> None:
    budget_study = for_the_budget(study, {})
    assert type(budget_study._storage) is not RetryingStorage  # the wrapper hands on what it does not define
    trial = budget_study.ask()
    commits = _commits(storage)
    set_user_attrs(trial, ATTRS)
    assert len(commits) == 1
    assert _as_json(storage.get_trial(trial._trial_id).user_attrs) == _as_json(trial.user_attrs) == _as_json(ATTRS)


def test_a_storage_without_the_batch_takes_them_one_by_one() -> None:
    study = optuna.create_study()  # in memory, as the Python API's own study may be
    trial = study.ask()
    set_user_attrs(trial, {"a": 1, "b": {"c": [2]}})
    assert study.trials[0].user_attrs == {"a": 1, "b": {"c": [2]}} == trial.user_attrs


def test_no_attrs_is_no_write_even_on_a_finished_trial(storage: RetryingStorage, study: optuna.Study) -> None:
    trial = study.ask()
    study.tell(trial, 0.5)
    commits = _commits(storage)
    set_user_attrs(trial, {})  # as the per-key loop of another storage: nothing, and nothing refused
    assert commits == [] and storage.get_trial(trial._trial_id).user_attrs == {}
