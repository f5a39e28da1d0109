"""The process caches: bounded, least recently used out first, and all emptied by ``clear_caches``."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from trial_executor import clear_caches, demo_dataset
from trial_executor._caches import BoundedCache, cache_names
from trial_executor.batches._tokenization import tokenize_data
from trial_executor.model._loading import load_model, train_wordpiece_tokenizer
from trial_executor.model._pretrained_cache import PRETRAINED
from trial_executor.train import run_trial  # noqa: F401  # registers the training loop's caches too


def test_a_cache_keeps_its_size_and_drops_the_least_recently_used_first() -> None:
    cache: BoundedCache[str, list[int]] = BoundedCache("test.lru", size=2)
    a, b, c = [1], [2], [3]
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is a  # "a" is now the most recently used: "b" goes first
    cache.put("c", c)
    assert list(cache) == ["a", "c"] and "b" not in cache and len(cache) == 2
    assert "a" in cache and list(cache) == ["a", "c"]  # asking leaves the order as it was
    made = []
    assert cache.get_or_make("c", lambda: made.append(1) or [9]) is c and made == []
    assert cache.get_or_make("d", lambda: [4]) == [4] and list(cache) == ["c", "d"]
    assert cache.get("a") is None and cache.get("a", b) is b
    with pytest.raises(ZeroDivisionError):
        cache.get_or_make("e", lambda: [1 // 0])
    assert "e" not in cache and list(cache) == ["c", "d"]


def test_none_is_a_value_that_is_kept() -> None:
    cache: BoundedCache[str, int | None] = BoundedCache("test.none", size=1)
    calls = []
    for _ in range(2):
        assert cache.get_or_make("limit", lambda: calls.append(1)) is None
    assert calls == [1]


def test_names_are_unique_and_a_dropped_cache_leaves_the_registry() -> None:
    cache: BoundedCache[str, int] = BoundedCache("test.named", size=1)
    with pytest.raises(ValueError, match="exists already"):
        BoundedCache("test.named", size=1)
    with pytest.raises(ValueError, match="at least 1"):
        BoundedCache("test.empty", size=0)
    assert "test.named" in cache_names()
    del cache
    gc.collect()
    assert "test.named" not in cache_names()


def test_clear_caches_empties_every_cache_of_the_process(tmp_path: Path) -> None:
    ours: BoundedCache[str, int] = BoundedCache("test.cleared", size=3)
    ours.put("x", 1)
    data = demo_dataset(n_train=32, n_valid=8, seed=27027)
    tokenizer = train_wordpiece_tokenizer(data.train_texts)
    model, _ = load_model("tiny-bert", data.label_names, data.train_texts)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    load_model(str(tmp_path), data.label_names, data.train_texts)
    loads = PRETRAINED.loads
    load_model(str(tmp_path), data.label_names, data.train_texts)
    assert PRETRAINED.loads == loads
    tokens = tokenize_data(tokenizer, data, 16, percentile=99.5, max_positions=512, cache_dir=None)
    assert train_wordpiece_tokenizer(data.train_texts) is tokenizer
    assert tokenize_data(tokenizer, data, 16, percentile=99.5, max_positions=512, cache_dir=None).cache_hit
    expected = {"test.cleared", "model.wordpiece_tokenizers", "batches.tokenized_data", "model.pretrained", "model.configs",
                "model.checkpoint_dtypes", "train.collated_eval_batches", "train.unwritable_checkpoint_dirs"}
    assert expected <= set(cache_names())
    clear_caches()
    assert len(ours) == 0
    load_model(str(tmp_path), data.label_names, data.train_texts)
    assert PRETRAINED.loads == loads + 1  # read from the directory again
    again = train_wordpiece_tokenizer(data.train_texts)
    assert again is not tokenizer and again.get_vocab() == tokenizer.get_vocab()
    retokenized = tokenize_data(again, data, 16, percentile=99.5, max_positions=512, cache_dir=None)
    assert not retokenized.cache_hit and retokenized.train.input_ids == tokens.train.input_ids
