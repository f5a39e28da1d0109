"""benchmarks/study_vs_hf.py's arithmetic and its space (the runs themselves: ``--quick``, by hand)."""

from __future__ import annotations

import math

from benchmarks.study_vs_hf import SPACE, compare
from hpo import load_search_space


def _trial(number: int, state: str, value: float | None, finished_s: float) -> dict[str, object]:
    return {"number": number, "state": state, "value": value, "params": {}, "finished_s": finished_s}


def test_compare_reads_time_to_hf_best_and_best_within_hf_wall_from_complete_trials_only() -> None:
    hf = {"wall_s": 400.0, "trials": [_trial(0, "COMPLETE", 0.70, 100), _trial(1, "PRUNED", None, 150), _trial(2, "COMPLETE", 0.80, 390)]}
    ours = {"wall_s": 410.0, "trials": [
        _trial(0, "COMPLETE", 0.79, 40), _trial(1, "PRUNED", None, 50), _trial(2, "COMPLETE", 0.80, 90),
        _trial(3, "COMPLETE", 0.82, 300), _trial(4, "COMPLETE", 0.95, 405),  # after HF's wall time: not counted
    ]}
    row = compare(0, hf, ours)
    assert row["hf_best"] == 0.80 and row["hf_time_to_its_best_s"] == 390
    assert row["ours_time_to_hf_best_s"] == 90 and math.isclose(row["time_ratio"], 90 / 400)
    assert row["ours_best_within_hf_wall"] == 0.82 and math.isclose(row["gain"], 0.02)
    never = compare(0, hf, {"wall_s": 400.0, "trials": [_trial(0, "COMPLETE", 0.75, 40)]})
    assert never["ours_time_to_hf_best_s"] is None and never["time_ratio"] == math.inf


def test_benchmark_space_is_the_issue_space_with_the_fine_tuning_defaults() -> None:
    space = load_search_space(SPACE)
    assert space.params["learning_rate"].low == 1e-5 and space.params["learning_rate"].high == 3e-4
    assert space.params["batch_size"].choices == [16, 32, 64] and space.params["fp_precision"].choices == ["fp32", "bf16"]
    assert space.fixed == {"model": "minilm-l6", "epochs": 1, "max_length": 64, "eval_every_samples": 1280}
    # Rungs in samples, at the one sampled evaluation, which every batch size reaches after the same rows.
    assert space.pruner.type == "successive_halving" and space.pruner.report_step == "samples"
    assert space.pruner.min_resource == space.fixed["eval_every_samples"]
    assert all(space.fixed["eval_every_samples"] % batch == 0 for batch in space.params["batch_size"].choices)
    assert not space.enqueue  # known-good configurations come only from --warm-start trec
    assert space.sampler.type == "tpe" and space.sampler.multivariate and space.sampler.constant_liar
