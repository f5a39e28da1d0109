"""Buckets: batches padded up to one of a few widths give the same results as dynamic padding."""

from __future__ import annotations

import random

import pytest
import torch

from trial_executor import TrainConfig, demo_dataset, run_trial
from trial_executor.batches._batching import Collation, TokenizedSplit, bucket_width, width_buckets
from trial_executor.model import PaddingMaskForward
from trial_executor.model._loading import load_model
from trial_executor.model._packed import PackedBertClassifier


def test_a_few_widths_multiples_of_16_up_to_max_length() -> None:
    assert width_buckets(128) == (16, 32, 48, 64, 96, 128)
    assert width_buckets(64) == (16, 32, 48, 64)
    assert width_buckets(20) == (20,)
    for max_length in (8, 13, 40, 77, 512):
        buckets = width_buckets(max_length)
        assert buckets[-1] == max_length and len(buckets) <= 12 and list(buckets) == sorted(set(buckets))
        assert all(w % 16 == 0 for w in buckets[:-1])
    assert [bucket_width(n, (16, 32, 64)) for n in (1, 16, 17, 33, 64)] == [16, 16, 32, 64, 64]
    assert bucket_width(17, None) == 17


def _split(rows: int, seed: int, vocab: int = 60) -> TokenizedSplit:
    rng = random.Random(seed)
    ids = [[2, *(rng.randrange(5, vocab) for _ in range(rng.randint(1, 40))), 3] for _ in range(rows)]
    return TokenizedSplit(ids, [rng.randrange(2) for _ in ids])


def test_batches_pad_up_to_their_bucket_and_keep_their_counts() -> None:
    split = _split(12, seed=3)
    longest = max(len(row) for row in split.input_ids)
    buckets = width_buckets(48)
    plain, padded = Collation(0)(split, range(12)), Collation(0, buckets=buckets)(split, range(12))
    width = padded.inputs["input_ids"].shape[1]
    assert width == bucket_width(longest, buckets) and width in buckets and width >= longest
    assert plain.inputs["input_ids"].shape[1] == longest
    # Same rows, same real tokens; only padding (pad id, mask 0) added on the right.
    assert torch.equal(padded.inputs["input_ids"][:, :longest], plain.inputs["input_ids"])
    assert (padded.inputs["input_ids"][:, longest:] == 0).all() and (padded.inputs["attention_mask"][:, longest:] == 0).all()
    assert (padded.rows, padded.real_tokens) == (plain.rows, plain.real_tokens)
    assert padded.padded_tokens == 12 * width > plain.padded_tokens


@pytest.mark.parametrize("packed", [False, True], ids=["hf-forward", "packed-forward"])
def test_bucket_padding_does_not_change_logits_loss_or_gradients(packed: bool) -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", ["a", "b"], ["words to build a vocabulary from"] * 3)
    model.eval()
    forward = PackedBertClassifier(model) if packed else PaddingMaskForward(model)
    split = _split(10, seed=4, vocab=len(tokenizer))
    results = []
    for buckets in (None, width_buckets(64)):
        batch = Collation(0, buckets=buckets, packed=packed)(split, range(10))
        out = forward(**batch.inputs)
        out.loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.zero_grad(set_to_none=True)
        results.append((out.logits.detach(), out.loss.detach(), grads))
    (logits, loss, grads), (logits_b, loss_b, grads_b) = results
    torch.testing.assert_close(logits_b, logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss_b, loss, rtol=1e-5, atol=1e-6)
    for g, g_b in zip(grads, grads_b, strict=True):
        torch.testing.assert_close(g_b, g, rtol=1e-4, atol=1e-6)


def test_trials_with_buckets_train_alike() -> None:
    data = demo_dataset(n_train=256, n_valid=64, seed=2)
    base = {"batch_size": 16, "max_steps": 6, "eval_every": 0, "device": "cpu", "packed_forward": True}
    plain = run_trial(TrainConfig(**base, buckets=False), data)
    bucketed = run_trial(TrainConfig(**base, buckets=True), data)
    assert bucketed.buckets and not plain.buckets
    assert bucketed.padding_efficiency < plain.padding_efficiency  # more padding, same real tokens
    # Attention dropout draws one mask element per grid cell, so wider grids draw other masks:
    # equal up to dropout's randomness (exact equality without dropout is the test above).
    assert bucketed.history[-1][1]["loss"] == pytest.approx(plain.history[-1][1]["loss"], abs=0.02)
