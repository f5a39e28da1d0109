"""Storage calls wait out a PostgreSQL restart: the study goes on and loses nothing."""

from __future__ import annotations

import threading
import time

import optuna
import pytest
from _private_postgres import PrivatePostgres
from optuna.trial import TrialState

from hpo import create_storage

pytestmark = pytest.mark.postgres


def test_a_study_survives_a_database_restart(private_postgres: PrivatePostgres) -> None:
    storage = create_storage(private_postgres.url)
    study = optuna.create_study(storage=storage, study_name="restart")
    errors: list[BaseException] = []

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -1, 1)
        for step in range(3):
            time.sleep(0.05)
            trial.report(x * step, step)
            trial.set_user_attr(f"seen_{step}", step)
        return x * x

    def optimize() -> None:
        try:
            study.optimize(objective, n_trials=30)
        except BaseException as err:  # reported by the assertion below
            errors.append(err)

    worker = threading.Thread(target=optimize)
    worker.start()
    while len(study.get_trials(states=(TrialState.COMPLETE,))) < 5:
        time.sleep(0.1)
    private_postgres.stop()
    time.sleep(3)  # calls fail meanwhile and are retried
    private_postgres.start()
    worker.join(timeout=120)

    assert not worker.is_alive() and not errors, errors
    states = [t.state for t in study.get_trials()]
    assert states.count(TrialState.COMPLETE) == 30 and len(states) == 30
    assert all(t.user_attrs == {"seen_0": 0, "seen_1": 1, "seen_2": 2} for t in study.get_trials())
