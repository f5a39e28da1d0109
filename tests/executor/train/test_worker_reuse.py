"""A worker's later trials reuse what its first one read and tokenized; early evaluations use a fixed sample."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

from trial_executor import TrainConfig, demo_dataset, run_trial
from trial_executor.batches._tokenization import tokenize_data
from trial_executor.model._loading import load_model
from trial_executor.model._pretrained_cache import PRETRAINED
from trial_executor.train._evaluation import eval_rows

WEIGHT = "bert.encoder.layer.0.attention.self.query.weight"


def _save_tiny(directory: Path, texts: list[str], seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model, tokenizer = load_model("tiny-bert", ["negative", "positive"], texts)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return load_file(directory / "model.safetensors")


def test_a_later_trial_reads_no_model_from_disk_and_starts_from_the_pretrained_weights(tmp_path: Path) -> None:
    data = demo_dataset(n_train=64, n_valid=16)
    saved = tmp_path / "saved"
    checkpoint = _save_tiny(saved, data.train_texts, seed=1)
    config = TrainConfig(model=str(saved), batch_size=16, max_steps=2, eval_every=0, learning_rate=1e-2, device="cpu")
    loads = PRETRAINED.loads
    run_trial(config, data)
    assert PRETRAINED.loads == loads + 1
    hits = PRETRAINED.hits
    run_trial(config, data)
    trained, _ = load_model(str(saved), data.label_names, data.train_texts)
    with torch.no_grad():
        trained.get_parameter(WEIGHT).add_(1.0)  # what training does to a trial's copy
    torch.manual_seed(7)
    fresh, _ = load_model(str(saved), data.label_names, data.train_texts)
    assert PRETRAINED.loads == loads + 1 and PRETRAINED.hits == hits + 3
    assert torch.equal(fresh.get_parameter(WEIGHT), checkpoint[WEIGHT])
    # The new head: the very weights an uncached load gives under the same seed.
    torch.manual_seed(7)
    uncached = AutoModelForSequenceClassification.from_pretrained(saved, num_labels=2)
    assert torch.equal(fresh.classifier.weight, uncached.classifier.weight)
    # A directory saved again is read again.
    checkpoint = _save_tiny(saved, data.train_texts, seed=2)
    again, _ = load_model(str(saved), data.label_names, data.train_texts)
    assert PRETRAINED.loads == loads + 2
    assert torch.equal(again.get_parameter(WEIGHT), checkpoint[WEIGHT])


def test_tokenized_data_is_reused_in_memory_across_trials() -> None:
    data = demo_dataset(n_train=48, n_valid=16, seed=16016)  # data no other test tokenizes
    _, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    first = tokenize_data(tokenizer, data, 32, percentile=99.5, max_positions=512, cache_dir=None)
    second = tokenize_data(tokenizer, data, 32, percentile=99.5, max_positions=512, cache_dir=None)
    other = tokenize_data(tokenizer, data, 16, percentile=99.5, max_positions=512, cache_dir=None)
    assert not first.cache_hit and second.cache_hit and not other.cache_hit
    assert second.train is first.train and second.valid is first.valid
    assert max(len(row) for row in other.train.input_ids) == 16


def test_early_evaluations_use_one_fixed_sample_and_the_final_one_every_row() -> None:
    random.seed(1)
    sample = eval_rows(48, 16)
    random.seed(2)  # a trial's seed does not move the sample
    assert eval_rows(48, 16) == sample and len(set(sample)) == 16 and sample != list(range(16))
    assert eval_rows(12, 16) == list(range(12)) and eval_rows(12, None) == list(range(12))
    data = demo_dataset(n_train=96, n_valid=48)
    config = TrainConfig(batch_size=32, max_steps=3, eval_every=1, eval_sample_size=16, device="cpu", fp_precision="bf16")
    result = run_trial(config, data)
    assert [metrics["eval_rows"] for _, metrics in result.history] == [16, 16, 48]
    assert result.metrics_full_split and result.eval_sample_rows == 16 and result.eval_precision == "bf16"
    assert result.history[0][1]["accuracy"] * 16 == round(result.history[0][1]["accuracy"] * 16)
    pruned = run_trial(config, data, report=lambda step, metrics: True)
    assert pruned.stopped_early and not pruned.metrics_full_split and pruned.metrics["eval_rows"] == 16
    # Early stopping decides on the sample; the result is still measured on every row.
    still = TrainConfig(**{**config.to_dict(), "learning_rate": 1e-12, "early_stopping_patience": 1, "max_steps": 6})
    stopped = run_trial(still, data)
    assert stopped.stopped_reason == "early_stopping" and stopped.steps < 6
    assert stopped.metrics_full_split and stopped.metrics["eval_rows"] == 48
