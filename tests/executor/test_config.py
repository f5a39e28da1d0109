"""TrainConfig as a frozen pydantic model: strict types, bounds, relations, and one-line messages."""

from __future__ import annotations

import pytest

from hpo import SearchSpaceError, parse_search_space
from trial_executor import TrainConfig


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        # YAML `true` is not a batch size, a quoted number is not a number.
        ({"batch_size": True}, "batch_size must be int, got True"),
        ({"learning_rate": "1e-3"}, "learning_rate must be float, got '1e-3'"),
        ({"max_grad_norm": "none"}, "max_grad_norm must be float | None, got 'none'"),
        ({"length_grouping": 1}, "length_grouping must be bool, got 1"),
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"learning_rate": 0}, "learning_rate must be > 0"),
        ({"max_length_percentile": 100.5}, "max_length_percentile must be in (0, 100]"),
        ({"eval_sample_size": 0}, "eval_sample_size must be >= 1 or null (every row)"),
        ({"fp_precision": "fp8"}, "fp_precision must be one of fp32, tf32, fp16, bf16"),
        ({"model": "  "}, "model must not be empty"),
        # numpy's seed range: a run would fail inside np.random.seed after the trial started.
        ({"seed": -1}, "seed must be in [0, 4294967295]"),
        ({"seed": 2**32}, "seed must be in [0, 4294967295]"),
        ({"max_length": 4}, "max_length must be an int >= 8 or 'auto'"),
        ({"prefetch_factor": 2}, "prefetch_factor needs num_workers > 0"),
        ({"batch_size": 0, "warmup_ratio": 1.0}, "batch_size must be >= 1; warmup_ratio must be in [0, 1)"),
        ({"batchsize": 16}, "batchsize is not a TrainConfig field"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        TrainConfig(**bad)
    assert str(raised.value) == message


def test_the_relations_hold_once_workers_are_on() -> None:
    config = TrainConfig(num_workers=2, persistent_workers=True, prefetch_factor=4)
    with pytest.raises(ValueError, match="persistent_workers needs num_workers > 0; prefetch_factor needs num_workers > 0"):
        config.replace(num_workers=0)


def test_evaluating_only_at_the_end_and_every_so_many_samples_is_refused() -> None:
    """eval_every 0 beside eval_every_samples (search_spaces/finetune.yaml's, say) evaluated every so many samples, silently."""
    with pytest.raises(ValueError, match=r"eval_every 0 evaluates only at the end and eval_every_samples every so many samples: "
                                         r"set eval_every_samples to null"):
        TrainConfig(eval_every=0, eval_every_samples=1024)
    assert TrainConfig(eval_every=0).eval_interval_steps == 0 and TrainConfig(eval_every=7, eval_every_samples=64, batch_size=32).eval_interval_steps == 2


def test_early_stopping_with_only_the_final_evaluation_is_refused() -> None:
    """One evaluation never stops a trial early: the patience was accepted and silently did nothing."""
    with pytest.raises(ValueError, match=r"^early_stopping_patience counts evaluations, and eval_every 0 evaluates only at the end: "
                                         r"set eval_every \(or eval_every_samples\) above 0, or early_stopping_patience to null$"):
        TrainConfig(eval_every=0, early_stopping_patience=2)
    assert TrainConfig(eval_every=0, eval_every_samples=None, early_stopping_patience=None).eval_interval_steps == 0
    assert TrainConfig(eval_every=5, early_stopping_patience=2).early_stopping_patience == 2


def test_values_are_kept_as_given_and_the_config_is_frozen() -> None:
    config = TrainConfig(learning_rate=1, fp_precision="none", max_length="auto")
    values = config.to_dict()
    # An int is a number, kept as an int: stored configs and checkpoints see what the user wrote.
    assert values["learning_rate"] == 1 and type(values["learning_rate"]) is int
    assert values["fp_precision"] == "fp32"  # the alias, normalised
    assert list(values) == list(TrainConfig.field_names()) and TrainConfig(**values) == config
    assert TrainConfig.defaults() == TrainConfig().to_dict()
    with pytest.raises(ValueError, match="frozen"):
        config.batch_size = 8  # type: ignore[misc]
    assert hash(config) == hash(TrainConfig(**values)) and config.replace(seed=1) != config


def test_the_space_loader_shows_the_message() -> None:
    with pytest.raises(SearchSpaceError, match=r"^search space: fixed: batch_size must be int, got True$"):
        parse_search_space({"params": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}}, "fixed": {"batch_size": True}})


@pytest.mark.parametrize(("samples", "batch", "accumulation", "expected"), [(40, 16, 1, 3), (80, 16, 2, 3), (56, 16, 1, 4), (1000, 48, 1, 21), (4, 16, 1, 1)])
def test_eval_every_samples_is_whole_steps_to_the_nearest_a_half_up_as_warmup(samples: int, batch: int, accumulation: int, expected: int) -> None:
    # round() took 2.5 steps to 2 but 3.5 to 4; warmup rounded a half up: one rule for both now.
    config = TrainConfig(eval_every_samples=samples, batch_size=batch, grad_accum_steps=accumulation)
    assert config.eval_interval_steps == expected
