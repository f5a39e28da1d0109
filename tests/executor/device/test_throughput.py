"""Honest throughput on the CPU: steady state after warm-up, start-up steps apart, cores shared with other
processes flagged; CUDA-only paths inert."""

from __future__ import annotations

import time

import torch
from _cpu_contention import sharing_one_core

from trial_executor import TrainConfig, demo_dataset, run_trial
from trial_executor.batches import window_shape
from trial_executor.batches._batching import Collation, TokenizedSplit, width_buckets
from trial_executor.device._throughput import SETUP_OCCURRENCES, WARMUP_STEPS, CpuWait, DeviceLag, TrainClock
from trial_executor.model._loading import load_model
from trial_executor.model._packed import PackedBertClassifier
from trial_executor.precision._policy import PrecisionPolicy
from trial_executor.train._build import build_trial


def test_a_long_enough_trial_reports_steady_state_throughput() -> None:
    data = demo_dataset(n_train=640, n_valid=32, seed=5)
    # Steady state needs 10 steps and half a second after them: 200 tiny steps outlast that on any machine.
    result = run_trial(TrainConfig(batch_size=16, epochs=5, max_steps=200, eval_every=0, device="cpu"), data)
    assert result.steady_state and result.throughput_samples_per_s > 0 and result.throughput_all_samples_per_s > 0
    assert result.compile_seconds == 0.0  # nothing compiled, and the CPU has no per-shape setup to time
    assert result.device_busy_fraction is None and result.host_limited is None  # CUDA events only
    short = run_trial(TrainConfig(batch_size=16, max_steps=3, eval_every=0, device="cpu"), data)
    assert not short.steady_state and short.throughput_samples_per_s == short.throughput_all_samples_per_s


def test_the_clock_leaves_warm_up_and_setup_steps_out() -> None:
    clock = TrainClock(torch.device("cpu"), track_setup=True)
    clock.start()
    assert [clock.is_setup((32, 24)) for _ in range(SETUP_OCCURRENCES + 1)] == [True] * SETUP_OCCURRENCES + [False]
    for _ in range(WARMUP_STEPS):
        clock.stepped(32, setup=False)
    time.sleep(0.5)
    clock.synced()  # warm-up over: steady state starts here
    began = clock.setup_begin()
    time.sleep(0.05)
    clock.setup_end(began)
    clock.stepped(32, setup=True)  # a new shape's first step: neither its samples nor its time count
    time.sleep(0.02)
    clock.stepped(32, setup=False)
    seconds = clock.stop()
    assert clock.steady and clock.steady_samples == 32 and clock.setup_seconds >= 0.05
    assert 0.02 <= clock.steady_seconds < 0.05 and seconds > 0.5
    assert DeviceLag(torch.device("cpu")).busy_fraction() is None


def test_a_run_too_short_for_steady_state_still_leaves_its_setup_steps_out() -> None:
    clock = TrainClock(torch.device("cpu"), track_setup=True)
    clock.start()
    began = clock.setup_begin()
    time.sleep(0.3)  # a compile
    clock.setup_end(began)
    clock.stepped(32, setup=True)
    assert clock.samples_per_s_after_setup(32, clock.stop()) is None  # only start-up ran: nothing else to time
    clock.start()
    time.sleep(0.02)
    clock.stepped(16, setup=False)
    seconds = clock.setup_seconds + clock.stop()
    assert not clock.steady and clock.steady_samples_per_s() is None
    assert clock.samples_per_s_after_setup(48, seconds) == 16 / (seconds - clock.setup_seconds)
    assert clock.samples_per_s_after_setup(48, seconds) > 48 / seconds  # the compile is not speed


def _epoch_shapes(**knobs: bool) -> tuple[int, int, int]:
    """Steps, distinct start-up shapes and start-up steps of one epoch of a trial's batches (as on CUDA: tracked)."""
    data = demo_dataset(n_train=640, n_valid=32, seed=5)
    config = TrainConfig(batch_size=16, max_length=64, device="cpu", packed_forward=True, **knobs)
    parts = build_trial(config, data, torch.device("cpu"), PrecisionPolicy.resolve("fp32", torch.device("cpu")))
    clock = TrainClock(torch.device("cpu"), track_setup=True)
    windows = [[batch] for batch in parts.batches.epoch(torch.Generator().manual_seed(0))]
    setup = sum(clock.is_setup(window_shape(window)) for window in windows)
    return len(windows), len({window_shape(w) for w in windows}), setup


def test_start_up_steps_are_those_of_a_new_grid_or_bucket_not_of_every_token_count() -> None:
    # CUDA's default path: packed, widths padded to buckets. The packed token count differs nearly
    # every batch; nothing is built per token count, so it is no new shape: only the few grids are.
    steps, shapes, setup = _epoch_shapes(buckets=True)
    assert shapes <= len(width_buckets(64)) + 1 and setup <= SETUP_OCCURRENCES * shapes < steps // 2
    # The compiled step: fixed rows, widths and token counts padded to buckets, every one compiled.
    steps, shapes, setup = _epoch_shapes(compile_step=True)
    assert 1 < shapes <= 8 and setup == SETUP_OCCURRENCES * shapes < steps // 2


def test_varlen_attention_is_inert_on_the_cpu() -> None:
    torch.manual_seed(0)
    model, _ = load_model("tiny-bert", ["a", "b"], ["words for a vocabulary"] * 3)
    model.eval()
    split = TokenizedSplit([[2, 5, 6, 7, 3], [2, 8, 3], [2, 9, 9, 9, 9, 9, 3]], [0, 1, 0])
    inputs = Collation(0, packed=True)(split, range(3)).inputs
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = PackedBertClassifier(model)(**inputs).logits
        varlen = PackedBertClassifier(model, varlen=True)(**inputs).logits
    assert torch.equal(plain, varlen)


def test_a_trial_sharing_its_core_with_another_process_is_cpu_contended() -> None:
    data = demo_dataset(n_train=640, n_valid=32, seed=5)
    # 200 steps: several seconds of ready time on one shared core, over the second it takes to judge.
    config = TrainConfig(batch_size=16, epochs=10, max_steps=200, eval_every=0, device="cpu")
    with sharing_one_core():
        shared = run_trial(config, data)
    # Two ready tasks on one core: each waits about half its time.
    assert shared.cpu_contended and shared.cpu_wait_fraction > 0.3, shared.cpu_wait_fraction
    # Too short to tell: a few steps' wait is mostly threads waking up, whoever else runs.
    short = run_trial(TrainConfig(batch_size=16, max_steps=2, eval_every=0, device="cpu"), data)
    assert short.cpu_wait_fraction is not None and short.cpu_contended is None


def test_cpu_wait_counts_only_the_segments_it_timed() -> None:
    wait = CpuWait()
    assert wait.fraction() is None  # nothing timed yet
    wait.start()
    end = time.thread_time() + 0.05  # CPU time, however busy the machine is
    while time.thread_time() < end:
        pass
    wait.stop()
    ran = wait.ran_ns
    assert ran >= 0.04e9 and 0.0 <= wait.fraction() <= 1.0
    time.sleep(0.05)
    wait.stop()  # not started: adds nothing
    assert wait.ran_ns == ran
