"""Issue 24, scale: the bulk reader builds exactly the trials Optuna's ORM reader builds, on real SQLite and PostgreSQL.

``read_trials`` replaces ``RDBStorage._get_trials`` under every storage ``create_storage``
opens (``BulkReadingRDBStorage``); here both read the same database and every field of every
trial must agree, for each selection Optuna's cached storage asks for.
"""

from __future__ import annotations

import math
import pickle
import random
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from hpo.storage import _bulk_reads, create_storage
from hpo.storage._bulk_reads import BulkReadingRDBStorage, read_trials

DISTRIBUTIONS = {
    "learning_rate": FloatDistribution(1e-5, 1e-2, log=True),
    "fp_precision": CategoricalDistribution(["fp32", "bf16", None, 3]),
    "batch_size": IntDistribution(8, 64, step=8),
}


def _trial(rng: random.Random, number: int) -> FrozenTrial:
    state = rng.choice([TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL])
    return optuna.trial.create_trial(
        state=state,
        values=[rng.choice([rng.random(), float("inf"), float("-inf")]), rng.random()] if state == TrialState.COMPLETE else None,
        params={"learning_rate": rng.uniform(1e-5, 1e-2), "fp_precision": rng.choice(["fp32", "bf16", None, 3]),
                "batch_size": rng.choice([8, 16, 64])},
        distributions=DISTRIBUTIONS,
        user_attrs={"config": {"model": "tiny-bert", "seed": number}, "hardware": {"device": "cpu", "tf32": None},
                    "throughput_samples_per_s": rng.random() * 1000, "note": "naïve ✓"},
        system_attrs={"fixed_params": {"batch_size": 16}} if number % 3 == 0 else {},
        intermediate_values={step: rng.choice([rng.random(), float("nan"), float("inf")]) for step in range(rng.randint(0, 3))},
    )


def _comparable(trial: FrozenTrial) -> dict[str, Any]:
    # NaN never equals itself: compare intermediate values with NaN spelled out.
    fields = dict(trial.__dict__)
    fields["intermediate_values"] = {step: "nan" if math.isnan(v) else v for step, v in trial.intermediate_values.items()}
    return fields


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[optuna.storages.RDBStorage, int, list[int]]:
    """An RDBStorage with a two-objective study of finished, running and waiting trials, its id and trial ids."""
    url = request.getfixturevalue("pg_database") if request.param == "postgres" else f"sqlite:///{tmp_path / 'bulk.db'}"
    storage = optuna.storages.RDBStorage(url)
    optuna.create_study(storage=storage, study_name="other").add_trial(_trial(random.Random(9), 0))
    study = optuna.create_study(storage=storage, study_name="bulk", directions=["maximize", "minimize"])
    rng = random.Random(0)
    study.add_trials([_trial(rng, number) for number in range(40)])
    study.enqueue_trial({"batch_size": 16})
    running = study.ask()
    running.set_user_attr("phase", "training")
    storage.set_trial_intermediate_value(running._trial_id, 1, 0.5)
    ids = [trial._trial_id for trial in study.get_trials(deepcopy=False)]
    return storage, study._study_id, ids


SELECTIONS = [
    (None, "none", "all"),
    ((TrialState.COMPLETE,), "none", "all"),
    ((TrialState.RUNNING, TrialState.WAITING, TrialState.FAIL), "none", "all"),
    (None, "first five", "middle"),  # Optuna's cache: the unfinished ids it holds and every trial after the last finished one
    (None, "more than the IN-list limit", "near the end"),
    ((TrialState.PRUNED,), "first five", "middle"),
]


def test_the_bulk_reader_builds_the_same_trials_as_optunas_orm_reader(
    filled: tuple[optuna.storages.RDBStorage, int, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, study_id, ids = filled
    monkeypatch.setattr(_bulk_reads, "_MAX_IN_LIST", 10)  # our own limit, lowered so 40 trials pass it
    monkeypatch.setenv("TZ", "America/New_York")  # stored UTC must come back as local time, as Optuna's does
    time.tzset()
    for states, included, greater_than in SELECTIONS:
        included = {"none": set(), "first five": set(ids[:5]), "more than the IN-list limit": set(ids[:15])}[included]
        greater_than = {"all": -1, "middle": ids[len(ids) // 2], "near the end": ids[-4]}[greater_than]
        by_orm = storage._get_trials(study_id, states, included, greater_than)
        in_bulk = read_trials(storage.engine, study_id, states, included, greater_than)
        assert by_orm, f"{states}, {included}, {greater_than}: an empty selection would prove nothing"
        assert [_comparable(t) for t in in_bulk] == [_comparable(t) for t in by_orm], (states, included, greater_than)
    monkeypatch.undo()
    time.tzset()


def test_an_unknown_study_is_a_key_error_as_in_optuna(filled: tuple[optuna.storages.RDBStorage, int, list[int]]) -> None:
    storage, study_id, _ = filled
    with pytest.raises(KeyError):
        storage._get_trials(study_id + 100, None, set(), -1)
    with pytest.raises(KeyError):
        read_trials(storage.engine, study_id + 100)


@pytest.mark.postgres
def test_create_storage_reads_in_bulk_through_its_cache_and_survives_pickling(pg_database: str) -> None:
    rng = random.Random(1)
    optuna.create_study(storage=pg_database, study_name="s", directions=["maximize", "minimize"]).add_trials(
        [_trial(rng, number) for number in range(30)]
    )
    storage = create_storage(pg_database)
    assert isinstance(storage._rdb, BulkReadingRDBStorage)
    study = optuna.load_study(study_name="s", storage=storage)
    reference = optuna.load_study(study_name="s", storage=optuna.storages.RDBStorage(pg_database))
    assert [_comparable(t) for t in study.trials] == [_comparable(t) for t in reference.trials]
    again = pickle.loads(pickle.dumps(storage))  # workers receive the storage pickled
    assert isinstance(again._rdb, BulkReadingRDBStorage)
    assert len(optuna.load_study(study_name="s", storage=again).trials) == 30
