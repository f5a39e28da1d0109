"""Issue 7's training knobs through the real loop: auto max_length, early stopping, evaluation order,
gradient checkpointing, DataLoader workers, precision aliases."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from trial_executor import STOPPED_EARLY_STOPPING, STOPPED_PRUNED, TextClassificationData, TrainConfig, demo_dataset, run_trial
from trial_executor.batches._batching import Collation, collate
from trial_executor.batches._tokenization import auto_max_length, tokenize, tokenize_data
from trial_executor.model._forward import enable_activation_checkpointing
from trial_executor.model._loading import load_model, train_wordpiece_tokenizer
from trial_executor.model._packed import PackedBertClassifier
from trial_executor.precision._policy import PrecisionPolicy
from trial_executor.train._evaluation import evaluate
from trial_executor.train._loop import seed_everything
from trial_executor.train._metrics import classification_metrics


@pytest.fixture(scope="module")
def data() -> TextClassificationData:
    return demo_dataset(n_train=400, n_valid=120, seed=7)


def test_auto_max_length_covers_the_percentile_in_multiples_of_8() -> None:
    lengths = [10] * 90 + [30] * 9 + [200]
    assert auto_max_length(lengths, 99.5, cap=512) == 200  # the 100th row is needed
    assert auto_max_length(lengths, 99.0, cap=512) == 32  # 30 rounded up
    assert auto_max_length(lengths, 90.0, cap=512) == 16
    assert auto_max_length(lengths, 99.5, cap=128) == 128  # never past the model's positions
    assert auto_max_length([3, 4], 100, cap=512) == 8


def test_auto_max_length_on_a_dataset_records_length_and_truncation(tmp_path: Path) -> None:
    # "good" is one token: a text of n words is n + 2 tokens ([CLS], [SEP]).
    texts = ["good " * 5] * 95 + ["good " * 40] * 5
    labels = [0, 1] * 50
    data = TextClassificationData(texts, labels, texts[:10], labels[:10], ["neg", "pos"])
    tokenizer = train_wordpiece_tokenizer(texts)
    auto = tokenize_data(tokenizer, data, "auto", percentile=95, max_positions=512, cache_dir=tmp_path)
    assert auto.max_length == 8 and auto.truncated_fraction == pytest.approx(0.05)
    assert max(len(row) for row in auto.train.input_ids) == 8
    assert not auto.cache_hit and tokenize_data(tokenizer, data, "auto", percentile=95, max_positions=512, cache_dir=tmp_path).cache_hit
    wide = tokenize_data(tokenizer, data, "auto", percentile=100, max_positions=512, cache_dir=tmp_path)
    assert wide.max_length == 48 and wide.truncated_fraction == 0.0  # its own cache entry, not the 8-token one
    assert max(len(row) for row in wide.train.input_ids) == 42
    fixed = tokenize_data(tokenizer, data, 16, percentile=95, max_positions=512, cache_dir=None)
    assert fixed.max_length == 16 and fixed.truncated_fraction == pytest.approx(0.05)


def test_auto_max_length_in_a_trial(data: TextClassificationData) -> None:
    result = run_trial(TrainConfig(max_length="auto", max_length_percentile=90, max_steps=2, device="cpu"), data)
    assert result.max_length % 8 == 0 and 8 <= result.max_length <= 64
    assert 0 <= result.truncated_fraction <= 0.1


def test_patience_stops_a_flat_run(data: TextClassificationData) -> None:
    # A learning rate this small leaves the predictions, and so the accuracy, where they are.
    config = TrainConfig(learning_rate=1e-12, epochs=4, batch_size=32, eval_every=2, early_stopping_patience=2, device="cpu")
    result = run_trial(config, data)
    assert result.stopped_reason == STOPPED_EARLY_STOPPING and not result.stopped_early
    assert [step for step, _ in result.history] == [2, 4, 6]  # best at 2, then 2 evaluations without improvement
    without = run_trial(TrainConfig(**{**config.to_dict(), "early_stopping_patience": None, "max_steps": 8}), data)
    assert without.stopped_reason is None and without.steps == 8


def test_the_pruner_wins_over_patience(data: TextClassificationData) -> None:
    config = TrainConfig(learning_rate=1e-12, epochs=2, eval_every=2, early_stopping_patience=5, device="cpu")
    result = run_trial(config, data, lambda step, metrics: step >= 4)
    assert result.stopped_reason == STOPPED_PRUNED and result.stopped_early and result.steps == 4


def test_evaluation_restores_the_order_it_sorted(data: TextClassificationData) -> None:
    seed_everything(0)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    split, _ = tokenize(tokenizer, data.valid_texts, data.valid_labels, 64)
    assert len({len(row) for row in split.input_ids}) > 5  # sorting by length really reorders
    model.eval()

    def one_row_at_a_time() -> torch.Tensor:  # in the split's own order
        with torch.inference_mode():
            return torch.cat([model(**collate(split, [i], 0)).logits for i in range(len(split))])

    logits = one_row_at_a_time()
    # Move the decision boundary into the widest gap near the median: predictions vary from row
    # to row, and no row sits so close to it that batching's rounding could flip it.
    diffs = (logits[:, 0] - logits[:, 1]).sort().values
    n = len(diffs)
    i = max(range(n // 4, 3 * n // 4), key=lambda j: diffs[j + 1] - diffs[j])
    with torch.no_grad():
        model.classifier.bias[1] += (diffs[i] + diffs[i + 1]) / 2
    logits = one_row_at_a_time()
    labels = torch.tensor(split.labels)
    assert 0 < int(logits.argmax(-1).sum()) < len(split)
    expected = classification_metrics(logits.argmax(-1), labels, 2)
    policy = PrecisionPolicy.resolve("fp32", torch.device("cpu"))
    config = TrainConfig(eval_batch_size=16)
    for forward in (model, PackedBertClassifier(model)):
        collation = Collation(0, packed=forward is not model)  # packed: collate computes its index tensors
        got = evaluate(model, forward, split, policy, config, collation, 2, torch.device("cpu"))
        assert got["accuracy"] == expected["accuracy"] and got["macro_f1"] == expected["macro_f1"]
        assert got["loss"] == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-5)


def _saved_bytes_and_grads(forward: object, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[int, list[torch.Tensor]]:
    saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += tensor.numel() * tensor.element_size()
        return tensor

    model.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = forward(**batch).loss
    loss.backward()
    return saved, [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("packed", [True, False])
def test_gradient_checkpointing_saves_less_for_the_same_gradients(data: TextClassificationData, packed: bool) -> None:
    seed_everything(0)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0  # same function with and without recomputation
    model.bert.encoder.layer[0].attention.self.dropout.p = 0.0
    model.train()
    split, _ = tokenize(tokenizer, data.train_texts[:64], data.train_labels[:64], 64)
    batch = collate(split, list(range(64)), 0)
    if packed:
        plain, recomputed = PackedBertClassifier(model), PackedBertClassifier(model, gradient_checkpointing=True)
        base_bytes, base_grads = _saved_bytes_and_grads(plain, model, batch)
        ckpt_bytes, ckpt_grads = _saved_bytes_and_grads(recomputed, model, batch)
    else:
        base_bytes, base_grads = _saved_bytes_and_grads(model, model, batch)
        enable_activation_checkpointing(model)
        ckpt_bytes, ckpt_grads = _saved_bytes_and_grads(model, model, batch)
    assert ckpt_bytes < 0.75 * base_bytes, (ckpt_bytes, base_bytes)
    for a, b in zip(base_grads, ckpt_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("packed", [True, False])
def test_gradient_checkpointing_trial_matches_the_plain_one(data: TextClassificationData, packed: bool) -> None:
    config = TrainConfig(max_steps=6, eval_every=3, device="cpu", packed_forward=packed)
    plain = run_trial(config, data)
    recomputed = run_trial(TrainConfig(**{**config.to_dict(), "gradient_checkpointing": True}), data)
    # Dropout masks are replayed in the recomputation: the same run, up to summation order.
    for (step_a, a), (step_b, b) in zip(plain.history, recomputed.history, strict=True):
        assert step_a == step_b and a["loss"] == pytest.approx(b["loss"], rel=1e-4)


def test_dataloader_workers_give_the_same_run(data: TextClassificationData) -> None:
    config = TrainConfig(model="tiny-distilbert", epochs=2, batch_size=32, eval_every=6, length_grouping=True, device="cpu")
    in_process = run_trial(config, data)
    workers = TrainConfig(**{**config.to_dict(), "num_workers": 1, "persistent_workers": True, "prefetch_factor": 4})
    assert run_trial(workers, data).history == in_process.history
    # pin_memory from an older space: the CPU has nothing to pin for, and the run is the same.
    pinned = TrainConfig(**{**config.to_dict(), "pin_memory": True})
    assert run_trial(pinned, data).history == in_process.history


def test_precision_aliases_and_knob_validation() -> None:
    assert TrainConfig(fp_precision="none").fp_precision == "fp32"
    assert TrainConfig(fp_precision="no").fp_precision == "fp32"
    assert TrainConfig(max_length="auto").max_length == "auto"
    for bad, message in [
        ({"max_length": "long"}, "max_length must be an int >= 8 or 'auto'"),
        ({"finetune": "qlora"}, "finetune must be one of full, lora"),
        ({"early_stopping_metric": "f1"}, "early_stopping_metric must be one of"),
        ({"persistent_workers": True}, "persistent_workers needs num_workers > 0"),
        ({"lora_rank": 0}, "lora_rank must be >= 1"),
        ({"max_length": True}, "max_length must be int | str"),
    ]:
        with pytest.raises(ValueError, match=message):
            TrainConfig(**bad)


def test_the_objective_records_the_knobs(data: TextClassificationData) -> None:
    import optuna

    from hpo import parse_search_space
    from hpo.study._objective import make_objective

    space = parse_search_space({
        "objective": {"metric": "loss", "direction": "minimize"},
        "params": {"learning_rate": {"type": "float", "low": 1e-12, "high": 2e-12}},
        "fixed": {"max_length": "auto", "epochs": 3, "eval_every": 2, "early_stopping_patience": 1},
    })
    study = optuna.create_study(direction="minimize")
    study.optimize(make_objective(space, data, base_seed=0, device="cpu"), n_trials=1)
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.user_attrs["config"]["early_stopping_metric"] == "loss"  # the space's objective metric
    assert trial.user_attrs["stopped_reason"] == STOPPED_EARLY_STOPPING and trial.user_attrs["steps"] == 4
    assert study.user_attrs["max_length_auto"] == {"tiny-bert": trial.user_attrs["max_length_effective"]}
    assert trial.user_attrs["trainable_fraction"] == 1.0
