"""The objective's config of a trial (hpo.study._objective.executor_config): what early stopping watches."""

from __future__ import annotations

import pytest

from hpo import executor_config, parse_search_space

PARAMS = {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}}
FIXED = {"model": "tiny-bert", "max_steps": 4, "early_stopping_patience": 2}


@pytest.mark.parametrize(
    ("objectives", "watched"),
    [
        # The study optimises macro-F1 beside throughput: early stopping watched accuracy, which it does not optimise.
        ([{"name": "throughput_samples_per_s"}, {"name": "macro_f1"}], "macro_f1"),
        ([{"name": "peak_memory_mb"}, {"name": "loss"}, {"name": "accuracy"}], "loss"),
        ([{"name": "macro_f1"}], "macro_f1"),
        # No evaluation metric among the objectives: the task's first metric (accuracy for classification data).
        ([{"name": "throughput_samples_per_s"}, {"name": "peak_memory_mb"}], None),
    ],
)
def test_early_stopping_watches_the_first_evaluation_metric_among_the_objectives(objectives: list[dict[str, str]], watched: str | None) -> None:
    space = parse_search_space({"objectives": objectives, "params": PARAMS, "fixed": FIXED})
    config = executor_config({"fp_precision": "fp32"}, space, seed=0, device="cpu", cache_dir=None)
    assert config.early_stopping_metric == watched
    assert config.stop_metric("classification") == (watched or "accuracy")
