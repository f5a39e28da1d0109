"""Sentence pairs keep their token types end to end: the second text is embedded as segment 1."""

from __future__ import annotations

from pathlib import Path

import torch

from trial_executor import TextClassificationData, TrainConfig, run_trial
from trial_executor.batches._batching import Collation
from trial_executor.batches._tokenization import tokenize
from trial_executor.model import PaddingMaskForward
from trial_executor.model._loading import load_model
from trial_executor.model._packed import PackedBertClassifier
from trial_executor.precision._policy import PrecisionPolicy
from trial_executor.train._build import build_trial

FIRST = ["the movie was great", "a dull plot", "the service was slow but friendly", "great"]
SECOND = ["i agree", "the acting was not bad at all", "no", "the ending felt flat and long"]


def _pairs_data() -> TextClassificationData:
    texts, pairs = FIRST * 8, SECOND * 8
    return TextClassificationData(
        train_texts=texts, train_labels=[i % 2 for i in range(len(texts))], valid_texts=FIRST, valid_labels=[0, 1, 0, 1],
        label_names=["no", "yes"], train_pairs=pairs, valid_pairs=SECOND,
    )


def test_the_second_segment_gets_token_type_1_also_from_the_cache(tmp_path: Path) -> None:
    _, tokenizer = load_model("tiny-bert", ["no", "yes"], FIRST + SECOND)
    sep = tokenizer.sep_token_id
    hits = []
    for cache_dir in (None, tmp_path, tmp_path):  # no cache, cache written, cache read
        split, hit = tokenize(tokenizer, FIRST, [0, 1, 0, 1], 64, pairs=SECOND, cache_dir=cache_dir, token_types=True)
        hits.append(hit)
        assert split.token_type_ids is not None
        for ids, types in zip(split.input_ids, split.token_type_ids, strict=True):
            first_sep = ids.index(sep)
            assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
            assert types[-1] == 1 and ids[-1] == sep
    assert hits == [False, False, True]
    single, _ = tokenize(tokenizer, FIRST, [0, 1, 0, 1], 64, token_types=True)
    assert single.token_type_ids is None  # one text per row: every type is 0, nothing to carry


def test_packed_and_hf_forwards_agree_on_a_pair_batch_and_use_the_types() -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", ["no", "yes"], FIRST + SECOND)
    model.eval()
    split, _ = tokenize(tokenizer, FIRST, [0, 1, 0, 1], 64, pairs=SECOND, token_types=True)
    hf_inputs = Collation(tokenizer.pad_token_id)(split, range(4)).inputs
    packed_inputs = Collation(tokenizer.pad_token_id, packed=True)(split, range(4)).inputs
    assert hf_inputs["token_type_ids"].max() == 1 and (hf_inputs["token_type_ids"][hf_inputs["attention_mask"] == 0] == 0).all()

    reference = model(**hf_inputs)
    for forward, inputs in ((PackedBertClassifier(model), packed_inputs), (PaddingMaskForward(model), hf_inputs)):
        out = forward(**inputs)
        torch.testing.assert_close(out.logits, reference.logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.loss, reference.loss, rtol=1e-5, atol=1e-6)
    # The types change the function: without them the second text reads as part of the first.
    untyped = PackedBertClassifier(model)(**{k: v for k, v in packed_inputs.items() if k != "token_type_ids"})
    assert not torch.allclose(untyped.logits, reference.logits, atol=1e-4)


def test_trials_on_pairs_train_with_token_types() -> None:
    data = _pairs_data()
    config = TrainConfig(batch_size=8, max_steps=2, eval_every=0, device="cpu")
    parts = build_trial(config, data, torch.device("cpu"), PrecisionPolicy.resolve("fp32", torch.device("cpu")))
    batch = next(iter(parts.batches.epoch(torch.Generator().manual_seed(0))))[0]
    assert batch.inputs["token_type_ids"].max() == 1 and "packed_index" in batch.inputs
    result = run_trial(config, data)
    assert result.steps == 2 and result.packed_forward
    # DistilBERT has no token type embeddings: pairs run without them.
    distil = build_trial(
        TrainConfig(model="tiny-distilbert", batch_size=8, max_steps=1, device="cpu"), data, torch.device("cpu"),
        PrecisionPolicy.resolve("fp32", torch.device("cpu")),
    )
    assert distil.tokens.train.token_type_ids is None
