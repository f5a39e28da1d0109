"""The study's best trial (hpo._ranking): the search's own, however well a verdict trial scored, in every command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

import hpo
from hpo._ranking import ranked_trials
from hpo.reporting._export import best_document
from hpo.reporting._progress import best_so_far
from hpo.reporting._report import build_report, summary_lines
from hpo.reporting._run_lines import run_summary
from hpo.reporting._status import study_status
from hpo.study._verdict import source_trial

PRECISION = {"fp_precision": CategoricalDistribution(["fp32", "bf16"])}


def _trial(values: list[float], precision: str = "fp32", **attrs: Any) -> FrozenTrial:
    return optuna.trial.create_trial(
        values=values, params={"fp_precision": precision}, distributions=PRECISION,
        user_attrs={"config": {"fp_precision": precision, "seed": 0}, **attrs},
    )


def _verdict(values: list[float], precision: str, seed_index: int) -> FrozenTrial:
    marker = {"of_trial": 0, "precision": precision, "seed": seed_index, "seed_index": seed_index}
    return _trial(values, precision, verdict_trial=marker, enqueued_from=f"verdict:0:{precision}:{seed_index}")


def _study(directions: list[str], trials: list[FrozenTrial]) -> optuna.Study:
    study = optuna.create_study(directions=directions)
    for trial in trials:
        study.add_trial(trial)
    return study


def test_a_verdict_trial_that_scored_higher_is_not_the_best_anywhere() -> None:
    # Trial 0 is the search's best; its verdict re-trained it with another seed in bf16 and scored higher (trial 3).
    study = _study(["maximize"], [_trial([0.70]), _trial([0.65]), _verdict([0.70], "fp32", 0), _verdict([0.75], "bf16", 1)])
    assert study.best_trial.number == 3  # Optuna counts every complete trial
    assert [t.number for t in hpo.best_trials(study)] == [0] and [t.number for t in ranked_trials(study)] == [0, 1]
    assert source_trial(study).number == 0
    assert best_document(study)["trial"] == 0
    assert best_so_far(study, ["accuracy"]) == "best accuracy=0.7 (trial 0)"
    assert study_status(study._storage, study).best == [(0, {"value": 0.70})]
    summary = run_summary(study, "sqlite:///x.db", 2, ["accuracy"])
    assert "Best trial 0: accuracy=0.7\n" in summary and "Best trial 3" not in summary
    # The search's counts, and the verdict trials apart.
    assert "2 of 2 budgeted trials finished (2 complete, 0 pruned); not counted: 0 failed, 0 skipped as unsupported on this machine, verdict trials (complete 2)" in summary
    # Rerun with a smaller budget: a study never shrinks ("2 of 1 budgeted" read as a count gone wrong).
    assert ": 2 (more than the 1 budgeted) trials finished (2 complete" in run_summary(study, "sqlite:///x.db", 1, ["accuracy"])
    report = build_report(study, "sqlite:///x.db")
    assert [t.number for t in report.front] == [0] and [t.number for t in report.trials] == [0, 1]
    assert [(r.precision, r.trials) for r in report.rows] == [("fp32", 2)]  # bf16 ran in the verdict only
    assert "Trials: 2 complete; 2 verdict trials (the precision verdict's, left out here)" in summary_lines(report)


def test_an_infeasible_trial_is_never_the_best_and_ties_go_to_the_earlier_trial() -> None:
    study = _study(["minimize"], [_trial([0.5]), _trial([0.1], feasible=False), _trial([0.5])])
    assert [t.number for t in ranked_trials(study)] == [0, 2] and [t.number for t in hpo.best_trials(study)] == [0]
    empty = _study(["minimize"], [_verdict([0.1], "fp32", 0)])
    assert hpo.best_trials(empty) == [] and best_so_far(empty, ["loss"]) == ""
    with pytest.raises(hpo.UserError, match=r"^best_trials takes a study, got a str; pass hpo.load\(name, storage=...\)$"):
        hpo.best_trials("s1")  # type: ignore[arg-type]  # it was an AttributeError from inside


def test_the_pareto_front_is_the_searchs_even_where_a_verdict_trial_dominates_it() -> None:
    # accuracy (max) and peak memory (min): the verdict's bf16 trial 3 dominates both search trials on the front.
    study = _study(["maximize", "minimize"], [
        _trial([0.80, 100.0]), _trial([0.70, 50.0]), _trial([0.60, 120.0]), _verdict([0.85, 40.0], "bf16", 0),
        _trial([0.80, 100.0]),  # the same values as trial 0: neither dominates the other
    ])
    assert [t.number for t in study.best_trials] == [3]
    assert [t.number for t in hpo.best_trials(study)] == [0, 1, 4]
    assert [e["trial"] for e in best_document(study)["pareto_front"]] == [0, 1, 4]
    assert best_so_far(study, ["accuracy", "peak_memory_mb"]) == "Pareto front: 3 trials"
    one = _study(["maximize", "minimize"], [_trial([0.80, 100.0]), _trial([0.70, 120.0])])
    assert best_so_far(one, ["accuracy", "peak_memory_mb"]) == "Pareto front: 1 trial"
    with pytest.raises(ValueError, match="single-objective"):
        ranked_trials(study)


def test_pruned_and_failed_trials_are_never_the_best() -> None:
    study = _study(["maximize"], [
        optuna.trial.create_trial(state=TrialState.PRUNED, params={"fp_precision": "fp32"}, distributions=PRECISION,
                                  intermediate_values={1: 0.99}),
        _trial([0.6]),
    ])
    assert [t.number for t in hpo.best_trials(study)] == [1]


def test_every_command_says_why_there_is_no_best_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Complete trials that all break the constraints: the verdict said 'no complete trial', the warm start 'no complete
    trial', `best --save-model` sent a several-objective study to `best --format space`, which refuses a front."""
    from hpo.reporting._status import status_lines
    from hpo.space import parse_search_space
    from hpo.storage._best_model import export_best_model
    from hpo.study._warm_start import warm_start_configurations

    study = _study(["maximize"], [_trial([0.7], feasible=False), _trial([0.6], feasible=False)])
    with pytest.raises(hpo.UserError, match=r"has no best trial: none meets the space's constraints; run more trials"):
        best_document(study)
    with pytest.raises(hpo.UserError, match=r"has no best trial to re-train: none meets the space's constraints; .* or pass --trial N$"):
        source_trial(study)
    assert "  best: none yet (none meets the space's constraints)" in status_lines(study_status(study._storage, study))
    with pytest.raises(hpo.UserError, match=r"kept no model: it has no best trial \(none meets the space's constraints\)"):
        export_best_model(study, str(tmp_path / "store"), tmp_path / "out")
    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}}})
    assert warm_start_configurations(space, study, 3) == []
    assert capsys.readouterr().err == f"warm start: {study.study_name!r} has no best trial (none meets the space's constraints); nothing enqueued\n"
    empty = _study(["maximize"], [])
    assert "  best: none yet (none has completed yet)" in status_lines(study_status(empty._storage, empty))
    front = _study(["maximize", "minimize"], [_trial([0.8, 100.0])])
    with pytest.raises(hpo.UserError, match=r"kept no model: a study with several objectives keeps none .* paste its fixed: block"):
        export_best_model(front, str(tmp_path / "store"), tmp_path / "out")


def test_a_verdict_of_a_front_with_no_feasible_trial_says_why_not_to_ask_best(capsys: pytest.CaptureFixture[str]) -> None:
    """Several objectives and no trial meeting the constraints: the verdict sent the user to `best` for the front,
    which then refused (no best trial)."""
    study = _study(["maximize", "minimize"], [_trial([0.5, 40.0], feasible=False)])
    with pytest.raises(hpo.UserError, match=r"has no best trial to re-train: none meets the space's constraints; .* or pass --trial N$"):
        source_trial(study)
    front = _study(["maximize", "minimize"], [_trial([0.8, 100.0])])
    with pytest.raises(hpo.UserError, match=r"several objectives: pass --trial N, one of its Pareto front"):
        source_trial(front)
    assert source_trial(front, 0).number == 0
