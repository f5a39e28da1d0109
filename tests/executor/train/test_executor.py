"""The training loop through real torch and transformers, on the CPU."""

from __future__ import annotations

import re

import pytest
import torch

from trial_executor import TextClassificationData, TrainConfig, demo_dataset, run_trial
from trial_executor.batches._batching import Collation, TokenizedSplit, collate, train_batches
from trial_executor.train._metrics import classification_metrics


@pytest.fixture(scope="module")
def data() -> TextClassificationData:
    return demo_dataset(n_train=1200, n_valid=200, seed=3)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_learns_well_above_chance(data: TextClassificationData, precision: str) -> None:
    config = TrainConfig(
        model="tiny-bert", fp_precision=precision, epochs=6, batch_size=32, learning_rate=1e-3, eval_every=50, device="cpu"
    )
    result = run_trial(config, data)
    assert result.metrics["accuracy"] > 0.72, result.history
    assert result.precision_effective == precision
    assert result.used_grad_scaler is (precision == "fp16")
    assert result.history[-1][1]["loss"] < result.history[0][1]["loss"]
    assert result.throughput_samples_per_s > 0 and result.throughput_tokens_per_s > result.throughput_samples_per_s
    assert result.peak_memory_mb > 0  # the trial's own increase over what the process held before it
    assert result.train_seconds > 0 and result.eval_seconds > 0


def test_same_seed_same_run(data: TextClassificationData) -> None:
    config = TrainConfig(model="tiny-distilbert", epochs=1, batch_size=32, eval_every=10, seed=11, device="cpu")
    first, second = run_trial(config, data), run_trial(config, data)
    assert first.history == second.history
    other = run_trial(TrainConfig(**{**config.to_dict(), "seed": 12}), data)
    assert other.history != first.history


def test_report_callback_stops_the_run(data: TextClassificationData) -> None:
    seen: list[int] = []

    def report(step: int, metrics: dict[str, float]) -> bool:
        seen.append(step)
        assert {"accuracy", "macro_f1", "loss", "train_loss"} <= set(metrics)
        return step >= 10

    result = run_trial(TrainConfig(epochs=2, batch_size=32, eval_every=5, device="cpu"), data, report)
    assert seen == [5, 10]
    assert result.stopped_early and result.steps == 10


def test_gradient_accumulation_and_max_steps(data: TextClassificationData) -> None:
    # 1200 rows / 16 = 75 micro-batches; windows of 4 give 19 optimizer steps per epoch.
    result = run_trial(TrainConfig(epochs=2, batch_size=16, grad_accum_steps=4, eval_every=0, device="cpu"), data)
    assert result.steps == 38 and len(result.history) == 1
    capped = run_trial(TrainConfig(epochs=5, batch_size=16, max_steps=7, eval_every=3, device="cpu"), data)
    assert capped.steps == 7
    assert [step for step, _ in capped.history] == [3, 6, 7]


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
def test_schedules_run(data: TextClassificationData, schedule: str) -> None:
    result = run_trial(TrainConfig(epochs=1, max_steps=6, lr_schedule=schedule, warmup_ratio=0.5, eval_every=0, device="cpu"), data)
    assert result.steps == 6


def test_dynamic_padding_pads_each_batch_to_its_longest_row() -> None:
    split = TokenizedSplit(input_ids=[[1, 2], [1, 2, 3, 4], [5]], labels=[0, 1, 0])
    batch = collate(split, [0, 2], pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2], [5, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1], [1, 0]]
    epoch = list(train_batches(split, 2, Collation(0), torch.Generator().manual_seed(0)))
    assert sorted(label for chunks in epoch for chunk in chunks for label in chunk.inputs["labels"].tolist()) == [0, 0, 1]


def test_metrics_on_a_hand_made_example() -> None:
    predictions = torch.tensor([0, 0, 1, 1, 2])
    labels = torch.tensor([0, 1, 1, 1, 0])
    metrics = classification_metrics(predictions, labels, num_labels=3)
    assert metrics["accuracy"] == 3 / 5  # the count over the rows, exactly: a float32 mean gave 0.6000000238418579
    # F1 per class: 0 -> 2*1/(2+1+1)=0.5, 1 -> 2*2/(4+0+1)=0.8, 2 -> 0.
    assert metrics["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)


def test_invalid_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="fp_precision"):
        TrainConfig(fp_precision="fp8")


def test_adamw_is_fused_where_supported() -> None:
    from trial_executor.train._optimizer import make_optimizer

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    optimizer = make_optimizer(model, TrainConfig(weight_decay=0.1), torch.device("cpu"))
    assert optimizer.defaults["fused"] is True
    decays = sorted(group["weight_decay"] for group in optimizer.param_groups)
    assert decays == [0.0, 0.1]  # biases and norm weights are not decayed


def test_arguments_of_the_wrong_type_are_refused_before_any_work() -> None:
    """A dict config or a data path was an AttributeError from inside; a report that cannot be called a TypeError
    at the first evaluation, once the model was built and trained."""
    config, small = TrainConfig(max_steps=2, eval_every=1, device="cpu"), demo_dataset(n_train=40, n_valid=10, seed=1)
    for arguments, said in (
        (({"max_steps": 2}, small), "config must be a TrainConfig, got a dict; pass TrainConfig(**values)"),
        ((config, "train.csv"), "data must be a TextClassificationData, got a str; pass demo_dataset()"),
        ((config, None), "data must be a TextClassificationData, got a NoneType"),
        ((config, small, 5), "report must be a function or None, got 5; pass a function, or leave it out"),
    ):
        with pytest.raises(TypeError, match=f"^{re.escape(said)}"):
            run_trial(*arguments)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^checkpointing must be a Checkpointing or None, got 'ckpt'"):
        run_trial(config, small, checkpointing="ckpt")  # type: ignore[arg-type]


def test_an_exception_the_report_callback_raises_propagates_unchanged() -> None:
    class Pruned(Exception):
        pass

    def report(step: int, metrics: dict[str, float]) -> bool:
        raise Pruned(f"pruned at {step}")

    with pytest.raises(Pruned, match=r"^pruned at 1$"):
        run_trial(TrainConfig(max_steps=2, eval_every=1, batch_size=8, device="cpu"), demo_dataset(n_train=40, n_valid=10, seed=1), report)
