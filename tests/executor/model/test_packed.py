"""The packed BERT forward computes the HF forward's function: same logits, loss and gradients."""

from __future__ import annotations

import random

import pytest
import torch

from trial_executor import TrainConfig, demo_dataset, run_trial
from trial_executor.batches._batching import TokenizedSplit, collate
from trial_executor.model._loading import load_model
from trial_executor.model._packed import PackedBertClassifier, _WordEmbeddingLookup, cpu_dropout, supports_packed_forward


def _batch(vocab: int, rows: int, seed: int) -> dict[str, torch.Tensor]:
    rng = random.Random(seed)
    ids = [[2, *(rng.randrange(5, vocab) for _ in range(rng.randint(1, 30))), 3] for _ in range(rows)]
    return collate(TokenizedSplit(ids, [rng.randrange(3) for _ in ids]), list(range(rows)), pad_id=0)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def test_same_logits_loss_and_gradients_as_the_hf_forward() -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", ["a", "b", "c"], ["some text to build a vocabulary from"] * 3)
    model.eval()  # dropout off: both forwards are then deterministic
    batch = _batch(len(tokenizer), rows=12, seed=1)
    assert batch["attention_mask"].float().mean() < 0.8  # real padding to skip

    reference = model(**batch)
    reference.loss.backward()
    expected = _grads(model)
    packed = PackedBertClassifier(model)(**batch)
    packed.loss.backward()
    got = _grads(model)

    torch.testing.assert_close(packed.logits, reference.logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(packed.loss, reference.loss, rtol=1e-5, atol=1e-6)
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        # Key biases have a zero true gradient (softmax ignores a shift): compare on the largest gradient's scale.
        scale = max(grad.abs().max().item(), 1e-3)
        assert (got[name] - grad).abs().max().item() <= 1e-4 * scale, name


def test_bf16_autocast_stays_close() -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", ["a", "b"], ["more text for the vocabulary"] * 3)
    model.eval()
    batch = _batch(len(tokenizer), rows=8, seed=2)
    batch["labels"] %= 2
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference, packed = model(**batch), PackedBertClassifier(model)(**batch)
    torch.testing.assert_close(packed.logits.float(), reference.logits.float(), rtol=0.05, atol=0.05)


def test_torch_compile_traces_the_packed_forward_with_dynamic_shapes() -> None:
    """``torch_compile`` on the packed path compiles it with ``dynamic=True`` (the token count changes every
    batch): dynamo must trace it whole, for every shape, to the eager forward's results. The "eager"
    backend runs the traced graph as it is (the tracing is the part under test; no code generation)."""
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", ["a", "b", "c"], ["some text to build a vocabulary from"] * 3)
    model.eval()
    forward = PackedBertClassifier(model)
    compiled = torch.compile(forward, dynamic=True, fullgraph=True, backend="eager")
    for seed, rows in ((1, 12), (2, 7), (3, 12)):
        batch = _batch(len(tokenizer), rows=rows, seed=seed)
        expected, got = forward(**batch), compiled(**batch)
        torch.testing.assert_close(got.logits, expected.logits)
        torch.testing.assert_close(got.loss, expected.loss)


def test_word_embedding_gradient_is_autograds_across_steps_and_accumulation() -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", ["a", "b", "c"], ["some text to build a vocabulary from"] * 3)
    model.eval()
    weight = model.bert.embeddings.word_embeddings.weight
    first, second = _batch(len(tokenizer), rows=6, seed=4), _batch(len(tokenizer), rows=5, seed=5)
    model(**first).loss.backward()
    model(**second).loss.backward()  # accumulated, as over a gradient-accumulation window
    expected = _grads(model)["bert.embeddings.word_embeddings.weight"]
    model(**first).loss.backward()
    expected_first = _grads(model)["bert.embeddings.word_embeddings.weight"]

    forward = PackedBertClassifier(model)
    forward(**first).loss.backward()
    forward(**second).loss.backward()
    torch.testing.assert_close(weight.grad, expected, rtol=1e-5, atol=1e-7)
    buffer = weight.grad.data_ptr()
    model.zero_grad(set_to_none=True)
    forward(**first).loss.backward()  # the next step: same buffer, zeroed first
    assert weight.grad.data_ptr() == buffer
    torch.testing.assert_close(weight.grad, expected_first, rtol=1e-5, atol=1e-7)


def test_word_embedding_lookup_leaves_the_padding_row_alone_like_nn_embedding() -> None:
    weight = torch.randn(10, 4, requires_grad=True)
    ids = torch.tensor([0, 3, 3, 0, 7])
    upstream = torch.randn(5, 4)
    torch.nn.functional.embedding(ids, weight, padding_idx=0).backward(upstream)
    expected, weight.grad = weight.grad, None
    _WordEmbeddingLookup.apply(weight, ids, 0, {}).backward(upstream)
    torch.testing.assert_close(weight.grad, expected)
    assert not weight.grad[0].any()


def test_cpu_dropout_keeps_one_minus_p_scaled_by_its_inverse() -> None:
    torch.manual_seed(0)
    x = torch.ones(1_000_001, requires_grad=True)
    y = cpu_dropout(x, 0.1)
    scale = 65536 / (65536 - 6554)  # p = 0.1 rounds to 6554 / 65536
    assert y.unique().tolist() == pytest.approx([0.0, scale])
    assert abs((y != 0).float().mean().item() - 0.9) < 0.002
    assert abs(y.mean().item() - 1.0) < 0.003  # unbiased
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y != 0).float() * scale)  # the gradient goes through the same mask
    torch.manual_seed(0)
    torch.testing.assert_close(cpu_dropout(torch.ones(1_000_001), 0.1), y.detach())  # seeded: the same masks
    assert cpu_dropout(x, 0.0) is x


def test_training_mode_applies_dropout_reproducibly() -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", ["a", "b"], ["more text for the vocabulary"] * 3)
    batch = _batch(len(tokenizer), rows=8, seed=3)
    batch["labels"] %= 2
    forward = PackedBertClassifier(model)
    model.eval()
    without = forward(**batch).logits
    model.train()
    torch.manual_seed(1)
    first = forward(**batch).logits
    torch.manual_seed(1)
    assert torch.equal(forward(**batch).logits, first)
    assert not torch.allclose(first, without)


def test_other_architectures_keep_their_own_forward() -> None:
    distilbert, _ = load_model("tiny-distilbert", ["a", "b"], ["text"] * 3)
    assert not supports_packed_forward(distilbert)
    with pytest.raises(ValueError, match="no packed forward"):
        PackedBertClassifier(distilbert)


def test_trials_record_which_forward_ran() -> None:
    data = demo_dataset(n_train=300, n_valid=60, seed=1)
    base = {"epochs": 1, "batch_size": 32, "eval_every": 0, "device": "cpu"}
    assert run_trial(TrainConfig(model="tiny-bert", **base), data).packed_forward
    assert not run_trial(TrainConfig(model="tiny-bert", packed_forward=False, **base), data).packed_forward
    assert not run_trial(TrainConfig(model="tiny-distilbert", **base), data).packed_forward
