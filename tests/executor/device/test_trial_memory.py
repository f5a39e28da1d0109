"""A trial's recorded peak memory is its own, not what the process held before it."""

from __future__ import annotations

import os

import pytest
import torch

from trial_executor import TrainConfig, demo_dataset, run_trial
from trial_executor.device._hardware import NATIVE_CACHE_CAPACITY

BALLAST_MB = 256


def test_identical_trials_record_the_same_own_peak_whatever_the_process_held_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    data = demo_dataset(n_train=256, n_valid=64)
    config = TrainConfig(model="tiny-bert", batch_size=32, max_steps=4, eval_every=0, device="cpu", seed=3)
    first = run_trial(config, data).peak_memory_mb
    # What an earlier trial might leave behind: resident memory the next trial did not allocate.
    ballast = torch.ones(BALLAST_MB * 2**20 // 4)
    second = run_trial(config, data).peak_memory_mb
    assert float(ballast[-1]) == 1.0
    assert first > 0 and second > 0
    assert abs(second - first) < BALLAST_MB / 4, (first, second)
    # The CPU kernel caches are bounded before a worker's first trial uses them.
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == os.environ["LRU_CACHE_CAPACITY"] == NATIVE_CACHE_CAPACITY
