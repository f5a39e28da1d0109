"""Issue 24, scale of one study: reading commands and the dashboard's view read a study in a bounded number of queries.

The 5,000-trial timings are a benchmark (``benchmarks/scale.py``, figures in RESULTS.md); here,
on real PostgreSQL, the number of SQL statements each reading command sends must not grow
with the study's trials, so a study ten times larger costs the database no more round trips.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from hpo.cli._best import main as best_main
from hpo.cli._export import main as export_main
from hpo.cli._report import main as report_main
from hpo.cli._status import main as status_main
from hpo.reporting._dashboard_view import ReadableStorage
from hpo.storage import create_storage

pytestmark = pytest.mark.postgres

DISTRIBUTIONS = {"learning_rate": FloatDistribution(1e-4, 1e-2, log=True), "fp_precision": CategoricalDistribution(["fp32", "bf16"])}


def _add_trials(url: str, name: str, n: int) -> None:
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize", load_if_exists=True)
    rng = random.Random(n)
    study.add_trials([
        optuna.trial.create_trial(
            state=TrialState.COMPLETE, value=rng.random(), distributions=DISTRIBUTIONS,
            params={"learning_rate": rng.uniform(1e-4, 1e-2), "fp_precision": rng.choice(["fp32", "bf16"])},
            user_attrs={"throughput_samples_per_s": rng.uniform(100, 900), "hardware": {"device_type": "cpu"}},
        )
        for _ in range(n)
    ])
    storage.engine.dispose()


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """Every SQL statement any engine of this process sends meanwhile."""
    sent: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        sent.append(statement)

    sqlalchemy.event.listen(sqlalchemy.Engine, "before_cursor_execute", count)
    yield sent
    sqlalchemy.event.remove(sqlalchemy.Engine, "before_cursor_execute", count)


COMMANDS: dict[str, Callable[[str, str, Path], list[str]]] = {
    "status": lambda url, name, out: ["--storage", url, "--study-name", name],
    "report": lambda url, name, out: ["--storage", url, "--study-name", name, "--out", str(out / "report")],
    "export": lambda url, name, out: ["--storage", url, "--study-name", name, "--format", "csv", "--out", str(out.parent / f"{out.name}.csv")],
    "best": lambda url, name, out: ["--storage", url, "--study-name", name],
}
MAINS: dict[str, Callable[[Sequence[str] | None], int]] = {"status": status_main, "report": report_main, "export": export_main, "best": best_main}


def test_reading_commands_and_the_dashboard_view_send_as_many_queries_for_60_trials_as_for_6(
    pg_database: str, tmp_path: Path, statements: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _add_trials(pg_database, "small", 6)
    _add_trials(pg_database, "large", 60)
    for command, args in COMMANDS.items():
        counts = {}
        for name in ("small", "large"):
            statements.clear()
            assert MAINS[command](args(pg_database, name, tmp_path / f"{command}-{name}")) == 0, capsys.readouterr().err
            counts[name] = len(statements)
        assert counts["large"] == counts["small"], (command, counts)
    capsys.readouterr()

    storage = create_storage(pg_database)
    view = ReadableStorage(storage)
    study_id = storage.get_study_id_from_name("large")
    first = view.get_all_trials(study_id, deepcopy=False)
    statements.clear()
    again = view.get_all_trials(study_id, deepcopy=False)  # the dashboard polls: finished trials come from memory
    assert len(again) == 60 and len(statements) <= 2, statements
    assert [t.user_attrs for t in again] == [t.user_attrs for t in first] and "hardware.device_type" in again[0].user_attrs
    assert all(a is b for a, b in zip(again, first, strict=True))  # finished trials are not flattened again on each poll
    running = storage.create_new_trial(study_id)
    assert view.get_all_trials(study_id, deepcopy=False)[-1].user_attrs == {}
    storage.set_trial_user_attr(running, "worker", {"pid": 7})  # a trial that changed is shown afresh
    assert view.get_all_trials(study_id, deepcopy=False)[-1].user_attrs == {"worker.pid": 7}
