"""Regression and multi-label data: the task read from the labels or chosen, the targets, the metrics, a study end to end."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import run_cli
from optuna.trial import TrialState

import hpo
from hpo.reporting._export import best_space
from trial_executor import DataError, TrainConfig, load_text_classification, run_trial
from trial_executor.train._metrics import evaluation_metrics

TINY_FIXED = {"model": "tiny-bert", "batch_size": 16, "eval_every": 4, "max_length": 32, "learning_rate": 3e-3}


def _counting_rows(n: int, seed: int = 0) -> list[tuple[str, float]]:
    """Texts whose target is half the number of "up" words: a regression a tiny model learns in a few steps."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice(["up", "down", "flat"]) for _ in range(rng.randint(1, 5))]
        rows.append((" ".join(words), words.count("up") * 0.5))
    return rows


def _regression_csv(path: Path, n: int = 100) -> Path:
    path.write_text("text,score\n" + "".join(f"{text},{score}\n" for text, score in _counting_rows(n)))
    return path


def _multi_label_jsonl(path: Path, n: int = 100) -> Path:
    rng = random.Random(1)
    with path.open("w") as handle:
        for _ in range(n):
            labels = [name for name in ("Sci/Tech", "sport", "été") if rng.random() < 0.4]
            handle.write(json.dumps({"text": " ".join(labels) or "nothing", "label": labels}, ensure_ascii=False) + "\n")
    return path


def test_regression_and_correlation_metrics_match_numpy_on_a_fixed_prediction_set() -> None:
    predictions = torch.tensor([0.1, 0.4, 0.4, 0.9, 0.3, 0.7])
    targets = torch.tensor([0.0, 0.5, 0.25, 1.0, 0.5, 0.5])
    metrics = evaluation_metrics(predictions[:, None], targets)
    p, t = predictions.double().numpy(), targets.double().numpy()
    assert metrics["rmse"] == pytest.approx(np.sqrt(np.mean((p - t) ** 2)), rel=1e-6)
    assert metrics["loss"] == pytest.approx(np.mean((p - t) ** 2), rel=1e-6)
    assert metrics["pearson"] == pytest.approx(np.corrcoef(p, t)[0, 1], rel=1e-9)
    # Average ranks by hand: predictions 0.1 0.4 0.4 0.9 0.3 0.7 -> 1 3.5 3.5 6 2 5;
    # targets 0.0 0.5 0.25 1.0 0.5 0.5 -> 1 4 2 6 4 4.
    expected = np.corrcoef([1, 3.5, 3.5, 6, 2, 5], [1, 4, 2, 6, 4, 4])[0, 1]
    assert metrics["spearman"] == pytest.approx(expected, rel=1e-9)
    assert evaluation_metrics(torch.full((6, 1), 0.5), targets)["pearson"] == 0.0  # constant: no relation to measure


def test_multi_label_metrics_match_a_hand_count() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5], [-3.0, 1.0, -0.2], [1.0, 1.0, 1.0]])  # predicts {0,2}, {1}, {0,1,2}
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    metrics = evaluation_metrics(logits, targets)
    # label 0: tp 2; label 1: tp 1, fp 1; label 2: tp 1, fp 1, fn 1 -> micro tp 4, fp 2, fn 1.
    assert metrics["micro_f1"] == pytest.approx(8 / 11)
    assert metrics["macro_f1"] == pytest.approx((1 + 2 / 3 + 1 / 2) / 3)
    assert metrics["subset_accuracy"] == 1 / 3  # exactly the count over the rows
    assert metrics["loss"] == pytest.approx(torch.nn.functional.binary_cross_entropy_with_logits(logits, targets).item())


def _copy(path: Path) -> Path:
    """A validation file of the same rows (the training file itself is refused as its own validation)."""
    copy = path.with_name(f"valid-{path.name}")
    shutil.copyfile(path, copy)
    return copy


def test_the_task_comes_from_the_labels_or_the_choice_and_labels_stay_as_given(tmp_path: Path) -> None:
    floats = load_text_classification(_regression_csv(tmp_path / "r.csv"), label_column="score")
    assert floats.task == "regression" and floats.label_names == ["score"] and floats.num_labels == 1
    assert all(isinstance(x, float) for x in floats.train_labels) and 1.0 in floats.train_labels
    integers = tmp_path / "i.csv"
    integers.write_text("text,label\n" + "".join(f"t{i},{i % 4}\n" for i in range(20)))
    assert load_text_classification(integers).task == "classification"  # integer labels stay classes
    chosen = load_text_classification(integers, task="regression")
    assert chosen.task == "regression" and sorted(set(chosen.train_labels)) == [0.0, 1.0, 2.0, 3.0]
    sets = load_text_classification(_multi_label_jsonl(tmp_path / "m.jsonl"))
    assert sets.task == "multi_label" and sets.label_names == ["Sci/Tech", "sport", "été"]
    assert all(set(row) <= {0.0, 1.0} and len(row) == 3 for row in sets.train_labels)
    piped = tmp_path / "m.csv"
    piped.write_text('text,label\na,Sci/Tech|sport\nb,sport\nc,été|Sci/Tech\nd,sport\ne,"sport|Sci/Tech"\n')
    data = load_text_classification(piped, task="multi_label", valid_path=_copy(piped))
    assert data.label_names == ["Sci/Tech", "sport", "été"]
    assert data.train_labels[:3] == [[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]
    # " été " was trimmed into "été": a label is taken as written, so one with whitespace around it is refused.
    piped.write_text('text,label\na,Sci/Tech|sport\nb,sport\nc, été | Sci/Tech\nd,sport\n')
    with pytest.raises(DataError, match=r'm\.csv line 4 has label " été " with whitespace around it'):
        load_text_classification(piped, task="multi_label")


@pytest.mark.parametrize(
    ("body", "task", "expected"),
    [
        ("a,0.5\nb,pos\n", "auto", r"labels mix numbers with decimals and strings: 0\.5 \(.*line 2\) and \"pos\" \(.*line 3\)"),
        ("a,0.5\nb,pos\n", "regression", r"line 3 has label \"pos\", not a number; task regression needs one number"),
        ("a,0.5\nb,1e999\n", "auto", r"line 3 has label \"1e999\", which is not a finite number"),
        ("a,1.0\nb,2.0\n", "auto", r"labels are whole numbers written with decimals .*set task: regression"),
        ("a,0.5\nb,1.5\n", "classification", r"has label 0\.5; task classification takes integers or names; set task: regression"),
        # Numbers are named as the file writes them (the errors showed 1000.0 and 100.0).
        ("a,1e3\nb,2\n", "classification", r"line 2 has label 1e3; task classification takes integers or names"),
        ("a,1E2\nb,pos\n", "auto", r"labels mix numbers with decimals and strings: 1E2 \(.*line 2\) and \"pos\""),
        ("a,1.00\nb,2\n", "auto", r"labels are whole numbers written with decimals \(1\.00, .*line 2\)"),
        ("a,x||y\nb,y\n", "multi_label", r"line 2 has an empty label in \"x\|\|y\""),
        ("a,x|x\nb,y\n", "multi_label", r"line 2 has label \"x\" twice"),
        ("a,1|x\nb,y\n", "multi_label", r"labels mix integers and strings: 1 \(.*line 2\) and '[xy]'"),
        ("a,7\nb,7\n", "regression", r"a single target value \(7\) in training; regression needs targets that vary"),
    ],
)
def test_labels_that_do_not_fit_the_task_are_one_clear_error(tmp_path: Path, body: str, task: str, expected: str) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,label\n" + body)
    with pytest.raises(DataError, match=expected):
        load_text_classification(path, task=task, valid_path=_copy(path))


def test_nan_and_lists_in_json_are_refused_where_they_do_not_fit(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "label": 0.5}\n{"text": "b", "label": NaN}\n')
    with pytest.raises(DataError, match=r"line 2 has label NaN, which is not a finite number"):
        load_text_classification(path, valid_path=_copy(path))
    path.write_text('{"text": "a", "label": ["x"]}\n{"text": "b", "label": ["y"]}\n')
    with pytest.raises(DataError, match=r"has label \[\"x\"\]; task classification takes integers or names; set task: multi_label"):
        load_text_classification(path, valid_path=_copy(path), task="classification")


def test_a_tiny_model_learns_a_regression_target(tmp_path: Path) -> None:
    data = load_text_classification(_regression_csv(tmp_path / "r.csv", 120), label_column="score")
    config = TrainConfig(**{**TINY_FIXED, "learning_rate": 5e-3}, warmup_ratio=0.0, epochs=3, fp_precision="bf16", device="cpu")
    result = run_trial(config, data)
    first, last = result.history[0][1], result.history[-1][1]
    assert set(last) >= {"rmse", "pearson", "spearman", "loss"}
    # Predicting the mean scores about 0.5 here; measured: 0.53 at the first evaluation, 0.28 at the last.
    assert last["rmse"] < 0.7 * first["rmse"] and last["pearson"] > 0.7, result.history


@pytest.mark.parametrize("kind", ["regression", "multi_label"])
def test_packed_and_chunked_knobs_route_other_tasks_to_the_hf_forward(tmp_path: Path, kind: str) -> None:
    if kind == "regression":
        data = load_text_classification(_regression_csv(tmp_path / "r.csv", 60), label_column="score")
    else:
        data = load_text_classification(_multi_label_jsonl(tmp_path / "m.jsonl", 60))
    config = TrainConfig(
        **TINY_FIXED, max_steps=2, packed_forward=True, chunk_by_length=True, length_grouping=True, fp_precision="bf16", device="cpu",
    )
    result = run_trial(config, data)
    assert not result.packed_forward  # the packed forward computes single-label classifiers only
    assert all(np.isfinite(v) for v in result.metrics.values()) and result.metrics["loss"] > 0


def test_a_regression_study_minimises_rmse_and_reports_it_for_pruning(tmp_path: Path) -> None:
    space = {
        "objective": {"metric": "rmse"},  # minimised without saying so
        "pruner": {"type": "median", "n_startup_trials": 1},
        "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
        "fixed": {**TINY_FIXED, "max_steps": 8},
    }
    study = hpo.optimize(
        space, _regression_csv(tmp_path / "r.csv"), label_column="score", storage=f"sqlite:///{tmp_path / 'r.db'}",
        study_name="r", n_trials=2, device="cpu", artifact_store=str(tmp_path / "art"),
    )
    assert study.direction.name == "MINIMIZE"
    first, second = study.trials
    assert first.state == TrialState.COMPLETE
    reported = first.intermediate_values
    assert reported[4] > 0 and reported[max(reported)] == first.value == first.user_attrs["metrics"]["rmse"]
    if second.state == TrialState.PRUNED:  # the median pruner, minimising, prunes a higher rmse
        assert second.intermediate_values[4] > reported[4]


def test_a_multi_label_jsonl_study_runs_on_micro_f1(tmp_path: Path) -> None:
    space = {
        "task": "multi_label",
        "objective": {"metric": "micro_f1"},
        "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
        "fixed": {**TINY_FIXED, "max_steps": 4, "early_stopping_patience": 3},
    }
    study = hpo.optimize(
        space, _multi_label_jsonl(tmp_path / "m.jsonl"), storage=f"sqlite:///{tmp_path / 'm.db'}",
        study_name="m", n_trials=1, device="cpu", artifact_store=str(tmp_path / "art"),
    )
    (trial,) = study.get_trials()
    assert trial.state == TrialState.COMPLETE and study.direction.name == "MAXIMIZE"
    assert set(trial.user_attrs["metrics"]) >= {"micro_f1", "macro_f1", "subset_accuracy", "loss"}
    assert trial.value == trial.user_attrs["metrics"]["micro_f1"]
    assert best_space(study)["task"] == "multi_label"  # `best --format space` retrains on the same task


def test_an_objective_the_task_does_not_measure_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    storage = tmp_path / "s.db"
    space = {"params": {"learning_rate": {"type": "float", "low": 1e-3, "high": 2e-3}}}  # default objective: accuracy
    with pytest.raises(hpo.UserError, match=r"objective.metric: 'accuracy' is not measured on regression data; use one of rmse, "):
        hpo.optimize(space, _regression_csv(tmp_path / "r.csv"), label_column="score", storage=f"sqlite:///{storage}", device="cpu")
    with pytest.raises(hpo.UserError, match=r"early_stopping_metric: 'rmse' is not measured on multi_label data"):
        hpo.optimize(
            {**space, "task": "multi_label", "objective": {"metric": "micro_f1"}, "fixed": {"early_stopping_metric": "rmse"}},
            _multi_label_jsonl(tmp_path / "m.jsonl"), storage=f"sqlite:///{storage}", device="cpu",
        )
    # A constraint on such a metric was taken: each trial trained, then failed on KeyError: 'accuracy'.
    with pytest.raises(hpo.UserError, match=r"constraints.min_accuracy: 'accuracy' is not measured on regression data; use one of rmse, .* \(e.g. max_rmse\)"):
        hpo.optimize({**space, "objective": {"metric": "rmse"}, "constraints": {"min_accuracy": 0.5}},
                     _regression_csv(tmp_path / "r.csv"), label_column="score", storage=f"sqlite:///{storage}", device="cpu")
    # The example bounds the task's metric the same way round: a floor on quality stays a floor.
    with pytest.raises(hpo.UserError, match=r"constraints.min_accuracy: .* on multi_label data; .* \(e.g. min_micro_f1\)"):
        hpo.optimize({**space, "task": "multi_label", "objective": {"metric": "micro_f1"}, "constraints": {"min_accuracy": 0.5}},
                     _multi_label_jsonl(tmp_path / "m.jsonl"), storage=f"sqlite:///{storage}", device="cpu")
    assert not storage.exists()


def test_a_label_that_does_not_fit_is_one_line_on_the_command_line(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"t{i},{label}\n" for i, label in enumerate(["0.5", "pos", "0.75"] * 4)))
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump({
        "task": "regression", "objective": {"metric": "rmse"},
        "params": {"learning_rate": {"type": "float", "low": 1e-3, "high": 2e-3}},
    }))
    storage = tmp_path / "s.db"
    result = run_cli(["--storage", f"sqlite:///{storage}", "--space", str(space), "--data", str(data), "--device", "cpu"], tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr and not storage.exists()
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert 'd.csv line 3 has label "pos", not a number; task regression needs one number per row' in result.stderr
