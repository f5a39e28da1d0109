"""Tokenization cache, length grouping and padding efficiency."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
import torch

from trial_executor import TrainConfig, demo_dataset, run_trial
from trial_executor.batches._batching import Collation, TokenizedSplit, collate, epoch_batches, padding_efficiency
from trial_executor.batches._tokenization import tokenize
from trial_executor.model._loading import train_wordpiece_tokenizer


def test_padding_efficiency_of_a_hand_made_batch() -> None:
    split = TokenizedSplit(input_ids=[[1, 2, 3, 4], [5, 6], [7]], labels=[0, 1, 0])
    batch = Collation(pad_id=0)(split, [0, 1, 2])
    assert (batch.rows, batch.real_tokens, batch.padded_tokens) == (3, 7, 12)
    assert padding_efficiency(batch) == pytest.approx(7 / 12)
    assert padding_efficiency(Collation(pad_id=0)(split, [1])) == 1.0


def _lengths_split(n: int) -> TokenizedSplit:
    lengths = torch.randint(3, 60, (n,), generator=torch.Generator().manual_seed(1)).tolist()
    return TokenizedSplit(input_ids=[[1] * k for k in lengths], labels=[0] * n)


@pytest.mark.parametrize("grouping", [False, True])
def test_every_sample_exactly_once_per_epoch(grouping: bool) -> None:
    split = _lengths_split(1000)
    batches = epoch_batches(split, 32, torch.Generator().manual_seed(0), length_grouping=grouping)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(1000))


def test_grouping_cuts_padding_and_keeps_the_epoch_random() -> None:
    split = _lengths_split(2000)
    generator = torch.Generator().manual_seed(0)

    def efficiency(batches: list[list[int]]) -> float:
        real = sum(len(split.input_ids[i]) for b in batches for i in b)
        padded = sum(len(b) * max(len(split.input_ids[i]) for i in b) for b in batches)
        return real / padded

    random_epoch = epoch_batches(split, 32, generator, length_grouping=False)
    first = epoch_batches(split, 32, generator, length_grouping=True)
    second = epoch_batches(split, 32, generator, length_grouping=True)
    assert efficiency(first) > 0.9 > efficiency(random_epoch)
    assert first != second  # a new order each epoch
    # Batch order is shuffled: batch lengths do not run from short to long (or long to short).
    widths = [max(len(split.input_ids[i]) for i in b) for b in first]
    assert widths != sorted(widths) and widths != sorted(widths, reverse=True)


def test_cache_is_reused_by_the_second_trial(tmp_path: Path) -> None:
    data = demo_dataset(n_train=300, n_valid=60)
    config = TrainConfig(epochs=1, eval_every=0, max_steps=3, cache_dir=str(tmp_path), device="cpu")
    first, second = run_trial(config, data), run_trial(config, data)
    assert not first.tokenize_cache_hit and second.tokenize_cache_hit
    assert len(list(tmp_path.glob("*.npz"))) == 2  # train and validation
    assert first.history == second.history  # cached ids train exactly like fresh ones
    other = run_trial(TrainConfig(**{**config.to_dict(), "max_length": 12}), data)
    assert not other.tokenize_cache_hit  # another max_length is another entry


def _tokenize_in_process(cache_dir: str) -> list[list[int]]:
    data = demo_dataset(n_train=2000, n_valid=10)
    tokenizer = train_wordpiece_tokenizer(data.train_texts)
    split, _ = tokenize(tokenizer, data.train_texts, data.train_labels, 64, cache_dir=cache_dir)
    return split.input_ids


def test_concurrent_writers_leave_one_valid_entry(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(2) as pool:  # each process imports torch: two writers race as well as three
        results = pool.map(_tokenize_in_process, [str(tmp_path)] * 2)
    assert results[0] == results[1]
    assert [p.suffix for p in tmp_path.iterdir()] == [".npz"]  # no temporary files left behind
    assert _tokenize_in_process(str(tmp_path)) == results[0]


def test_length_chunks_cover_the_batch_and_cut_padding() -> None:
    from trial_executor.batches._batching import length_chunks

    split = TokenizedSplit(input_ids=[[1] * k for k in [3] * 24 + [60] * 8], labels=[0] * 32)
    chunks = length_chunks(split, list(range(32)))
    assert sorted(i for chunk in chunks for i in chunk) == list(range(32))
    assert len(chunks) == 2 and all(len(chunk) >= 8 for chunk in chunks)
    padded = sum(len(chunk) * max(len(split.input_ids[i]) for i in chunk) for chunk in chunks)
    assert padded == 24 * 3 + 8 * 60  # versus 32 * 60 unchunked
    uniform = TokenizedSplit(input_ids=[[1] * 10] * 32, labels=[0] * 32)
    assert len(length_chunks(uniform, list(range(32)))) == 1


def test_chunked_batch_has_the_whole_batch_gradient() -> None:
    from trial_executor.batches._batching import length_chunks
    from trial_executor.model._loading import load_model

    data = demo_dataset(n_train=64, n_valid=8)
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    model.eval()  # no dropout, so both computations are deterministic
    split, _ = tokenize(tokenizer, data.train_texts, data.train_labels, 64)
    indices = list(range(32))

    model(**collate(split, indices, 0)).loss.backward()
    whole = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    chunks = length_chunks(split, indices, min_rows=4)
    assert len(chunks) > 1
    for chunk in chunks:
        (model(**collate(split, chunk, 0)).loss * len(chunk) / len(indices)).backward()
    for expected, param in zip(whole, model.parameters(), strict=True):
        torch.testing.assert_close(param.grad, expected, rtol=1e-4, atol=1e-6)


def test_collate_right_pads_ids_token_types_and_mask_to_the_width_asked_for() -> None:
    split = TokenizedSplit(input_ids=[[3, 4, 5], [6], [7, 8]], labels=[[0.5], [1.5], [2.5]], token_type_ids=[[0, 1, 1], [0], [0, 1]])
    batch = collate(split, [2, 1, 0], pad_id=9, width=4)
    assert batch["input_ids"].tolist() == [[7, 8, 9, 9], [6, 9, 9, 9], [3, 4, 5, 9]]
    assert batch["token_type_ids"].tolist() == [[0, 1, 0, 0], [0, 0, 0, 0], [0, 1, 1, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]
    assert batch["labels"].tolist() == [[2.5], [1.5], [0.5]] and batch["labels"].dtype == torch.float32
    assert all(batch[k].dtype == torch.long for k in ("input_ids", "token_type_ids", "attention_mask"))
    assert collate(split, [1], pad_id=9, width=None)["input_ids"].tolist() == [[6]]  # no width: the longest row's


def test_texts_that_join_alike_are_two_cache_entries(tmp_path: Path) -> None:
    """A text may hold a NUL: ["great\\0movie", "awful"] and ["great", "movie\\0awful"] joined by NULs read alike, and
    the second file's study took the first's token ids from the cache (as a hit)."""
    first, second = ["great\0movie", "awful"], ["great", "movie\0awful"]
    tokenizer = train_wordpiece_tokenizer(first + second + ["great movie awful"] * 4)
    tokenize(tokenizer, first, [0, 1], 32, cache_dir=str(tmp_path))
    cached, hit = tokenize(tokenizer, second, [0, 1], 32, cache_dir=str(tmp_path))
    fresh, _ = tokenize(tokenizer, second, [0, 1], 32)
    assert not hit and cached.input_ids == fresh.input_ids
