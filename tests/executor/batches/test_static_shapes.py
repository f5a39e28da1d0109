"""Static shapes for a compiled step (issue 23): fixed rows, token buckets, a dummy segment nothing reads."""

from __future__ import annotations

import random

import pytest
import torch

from trial_executor import TrainConfig
from trial_executor.batches._batching import Collation, TokenizedSplit, epoch_batches, width_buckets
from trial_executor.batches._static import TOKEN_MULTIPLE, StaticCollation, packed_width, token_buckets
from trial_executor.device._defaults import compile_step_refusal, resolve_knobs
from trial_executor.model import PaddingMaskForward
from trial_executor.model._loading import load_model, problem_type
from trial_executor.model._packed import PackedBertClassifier
from trial_executor.train._compiled import weighted_loss

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def _split(rows: int, seed: int, vocab: int = 60, longest: int = 40) -> TokenizedSplit:
    rng = random.Random(seed)
    ids = [[2, *(rng.randrange(5, vocab) for _ in range(rng.randint(1, longest - 2))), 3] for _ in range(rows)]
    return TokenizedSplit(ids, [rng.randrange(3) for _ in ids])


def test_widths_are_multiples_of_16() -> None:
    assert width_buckets(128) == (16, 32, 48, 64, 96, 128)
    assert all(w % 16 == 0 for w in width_buckets(512)[:-1])
    assert packed_width(60) == 64 and packed_width(64) == 64


@pytest.mark.parametrize("grouping", [False, True])
def test_token_buckets_are_few_multiples_of_64_that_hold_every_batch(grouping: bool) -> None:
    split = _split(600, seed=1)
    buckets = token_buckets(split, 16, length_grouping=grouping, seed=3)
    assert 1 <= len(buckets) <= 4 and all(b % TOKEN_MULTIPLE == 0 for b in buckets) and list(buckets) == sorted(set(buckets))
    assert buckets[-1] >= 16 * max(len(row) for row in split.input_ids)  # any batch fits the largest
    for seed in (3, 4):  # the epoch they were chosen from, and another
        for rows in epoch_batches(split, 16, torch.Generator().manual_seed(seed), length_grouping=grouping):
            total = sum(len(split.input_ids[i]) for i in rows) + 16 - len(rows)
            assert any(b >= total for b in buckets)
    # Chosen from the histogram: the batches of the epoch waste less than one bucket per multiple would.
    lengths = [sum(len(split.input_ids[i]) for i in rows) for rows in epoch_batches(
        split, 16, torch.Generator().manual_seed(3), length_grouping=grouping)]
    padded = sum(min(b for b in buckets if b >= t) - t for t in lengths)
    assert padded < len(lengths) * buckets[-1] / 4


def test_fixed_rows_token_buckets_and_a_dummy_segment() -> None:
    split = _split(10, seed=2)
    collation = StaticCollation(0, buckets=(48,), packed=True, rows=12, token_buckets=(128, 256, 512))
    batch = collation(split, range(10))
    inputs = batch.inputs
    assert inputs["input_ids"].shape == (12, 48) and inputs["labels"].shape == (12,)
    assert inputs["row_weight"].tolist() == [1.0] * 10 + [0.0] * 2
    assert inputs["attention_mask"][10:].sum(1).tolist() == [1, 1]  # one token each: never an empty row
    real = sum(len(row) for row in split.input_ids)
    assert (batch.rows, batch.real_tokens) == (10, real)
    size = inputs["packed_index"].numel()
    assert size in (128, 256, 512) and size >= real + 2
    assert (inputs["packed_index"][real + 2 :] == 12 * 48).all()  # the dummy segment: one past the grid
    assert inputs["cls_index"].shape == (12,) and inputs["cu_seqlens"].shape == (14,)
    assert inputs["cu_seqlens"][-1] == size and inputs["cu_seqlens"][-2] == real + 2
    # Every batch of this collation has the same shapes: what a compiled step needs.
    shapes = {tuple((k, tuple(v.shape)) for k, v in collation(split, list(range(n))).inputs.items()) for n in (3, 7)}
    assert len(shapes) == 1


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "hf-forward"])
def test_padding_rows_and_tokens_change_no_logit_loss_or_gradient(packed: bool) -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", ["a", "b", "c"], ["words to build a vocabulary from"] * 3)
    model.eval()  # no dropout: both paths compute the same function
    split = _split(10, seed=4, vocab=len(tokenizer))
    if packed:
        static_forward = PackedBertClassifier(model, static_shapes=True)
        static = StaticCollation(0, buckets=(64,), packed=True, rows=16, token_buckets=(512,))
    else:
        static_forward = PaddingMaskForward(model)
        static = StaticCollation(0, buckets=width_buckets(64), rows=16)
    reference = model(**Collation(0)(split, range(10)).inputs)
    reference.loss.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    inputs = dict(static(split, range(10)).inputs)
    labels, weight = inputs.pop("labels"), inputs.pop("row_weight")
    logits = static_forward(**inputs).logits
    loss = weighted_loss(logits, labels, weight, model.config.problem_type)
    loss.backward()
    torch.testing.assert_close(logits[:10], reference.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss, reference.loss, rtol=1e-5, atol=1e-6)
    for p, grad in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, grad, rtol=1e-4, atol=1e-6)


def test_problem_type_is_set_at_load_as_the_first_forward_would() -> None:
    model, tokenizer = load_model("tiny-bert", ["a", "b"], ["some text"] * 3)
    assert model.config.problem_type == "single_label_classification"
    assert problem_type("regression", 1) == "regression" and problem_type("multi_label", 3) == "multi_label_classification"
    batch = Collation(0)(_split(4, seed=5, vocab=len(tokenizer)), range(4))
    batch.inputs["labels"] %= 2
    model(**batch.inputs)  # what HF would set, so a graph compiled before keeps its guards
    assert model.config.problem_type == "single_label_classification"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"grad_accum_steps": 2}, "grad_accum_steps=2"),
        ({"chunk_by_length": True}, "chunk_by_length"),
        ({"fp_precision": "fp16"}, "GradScaler"),
        ({"gradient_checkpointing": True}, "gradient_checkpointing"),
    ],
)
def test_a_step_with_more_than_one_backward_or_a_grad_scaler_is_never_compiled(changes: dict, reason: str) -> None:
    config = TrainConfig(compile_step=True, **changes)
    for device in (CPU, CUDA):
        knobs = resolve_knobs(config, device, packed_supported=True, total_params=1_000, varlen_supported=False)
        assert not knobs.compile_step and reason in (knobs.compile_refused or "")
    assert compile_step_refusal(TrainConfig(), chunk_by_length=False) is None
    ok = resolve_knobs(TrainConfig(compile_step=True), CPU, packed_supported=True, total_params=1_000)
    assert ok.compile_step and ok.compile_refused is None and not ok.torch_compile
    # Chunking by default (the HF forward of a big model on the CPU) gives way to a compiled step asked for.
    big = resolve_knobs(TrainConfig(compile_step=True), CPU, packed_supported=False, total_params=50_000_000)
    assert big.compile_step and not big.chunk_by_length and big.buckets


def test_cuda_graphs_of_the_forward_are_refused_with_accumulation() -> None:
    base = {"torch_compile": True, "packed_forward": False, "buckets": True}
    captured = resolve_knobs(TrainConfig(**base), CUDA, packed_supported=True, total_params=1_000)
    assert captured.compile_mode == "reduce-overhead" and captured.compile_refused is None
    for changes in ({"grad_accum_steps": 4}, {"chunk_by_length": True}):
        knobs = resolve_knobs(TrainConfig(**base, **changes), CUDA, packed_supported=True, total_params=1_000)
        assert knobs.compile_mode is None and "never captured" in knobs.compile_refused
