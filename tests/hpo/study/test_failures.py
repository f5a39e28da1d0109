"""How trials end when training goes wrong: real studies, real torch, failures forced for real.

NaN comes from a learning rate of 1e6; out-of-memory from a global forward hook that raises
``MemoryError`` when the classifier sees a training batch larger than a limit (removed in a
finally); an unexpected error from the same hook raising ``ValueError``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from optuna.trial import FrozenTrial, TrialState

from hpo import create_storage, finished_count, make_objective, open_study, parse_search_space, run_to_budget
from hpo.reporting._run_lines import run_summary, trial_line
from hpo.study._budget import counts_toward_budget
from trial_executor import demo_dataset

DATA = demo_dataset(n_train=96, n_valid=24, seed=1)
FIXED = {"model": "tiny-bert", "batch_size": 16, "eval_batch_size": 8, "max_steps": 3, "eval_every": 0, "max_length": 32}


def _study(tmp_path: Path, params: dict[str, Any], **extra: Any) -> tuple[optuna.Study, Any]:
    space = parse_search_space({"params": params, "fixed": {**FIXED, **extra.pop("fixed", {})}, **extra})
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'f.db'}"), "f", space, DATA, seed=0)
    return study, make_objective(space, DATA, base_seed=0, device="cpu")


@contextlib.contextmanager
def _classifier_hook(error: type[Exception], over: int = 0, times: int | None = None, after: int = 0) -> Iterator[list[int]]:
    """Raise ``error`` when the classification head sees a training batch of more than ``over`` rows.

    Yields the batch sizes it raised on; ``times`` caps how often it raises; the first ``after`` such batches pass.
    """
    raised: list[int] = []
    passed = [0]

    def hook(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        is_head = isinstance(module, torch.nn.Linear) and module.out_features == DATA.num_labels
        if not (is_head and module.training and output.shape[0] > over):
            return
        passed[0] += 1
        if passed[0] > after and (times is None or len(raised) < times):
            raised.append(output.shape[0])
            raise error(f"injected: batch of {output.shape[0]} rows")

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        yield raised
    finally:
        handle.remove()


def _no_nan_values(trial: FrozenTrial) -> bool:
    return all(v is not None and math.isfinite(v) for v in trial.values or []) and all(
        math.isfinite(v) for v in trial.intermediate_values.values()
    )


def test_nan_loss_and_unsupported_precision_are_pruned_and_the_study_goes_on(tmp_path: Path) -> None:
    params = {
        "fp_precision": {"type": "categorical", "choices": ["fp32", "tf32", "fp16", "bf16"]},
        # The first choice is the default, so the fp32 baseline diverges too.
        "learning_rate": {"type": "categorical", "choices": [1.0e6, 1.0e-3]},
    }
    study, objective = _study(tmp_path, params)
    for precision, lr in (("tf32", 1.0e-3), ("bf16", 1.0e6), ("fp16", 1.0e6), ("fp32", 1.0e-3)):
        study.enqueue_trial({"fp_precision": precision, "learning_rate": lr})
    run_to_budget(study, objective, 4)

    trials = study.get_trials()
    assert [(t.params["fp_precision"], t.state) for t in trials] == [
        ("fp32", TrialState.PRUNED), ("tf32", TrialState.PRUNED), ("bf16", TrialState.PRUNED), ("fp16", TrialState.PRUNED),
        ("fp32", TrialState.COMPLETE),
    ]
    baseline, tf32, bf16, fp16, healthy = trials
    assert baseline.user_attrs["fp32_baseline"] is True
    # fp32 and bf16 stop as the training loss turns NaN; fp16's GradScaler skips the bad steps, so the
    # run ends, but with a NaN evaluation loss, which must not reach the sampler either.
    assert fp16.user_attrs["skip_detail"] == "final loss is nan"
    for diverged in (baseline, bf16, fp16):
        attrs = diverged.user_attrs
        assert attrs["skip_reason"] == "non_finite_loss" and "nan" in attrs["skip_detail"].lower()
        assert isinstance(attrs["skip_step"], int) and attrs["skip_step"] >= 0
        assert attrs["hardware"]["device_type"] == "cpu"
        assert counts_toward_budget(diverged) and _no_nan_values(diverged)
        assert "non_finite_loss" in trial_line(diverged, ["accuracy"])
    assert tf32.user_attrs["skip_reason"] == "unsupported_precision" and "CPU" in tf32.user_attrs["skip_detail"]
    assert not counts_toward_budget(tf32)
    assert math.isfinite(healthy.value) and finished_count(study) == 4
    summary = run_summary(study, "sqlite:///f.db", 4, ["accuracy"])
    assert "(1 complete, 3 pruned (3 non_finite_loss, 0 oom)); not counted: 0 failed, 1 skipped as unsupported" in summary


def test_oom_is_pruned_with_its_batch_size_and_counts(tmp_path: Path) -> None:
    study, objective = _study(tmp_path, {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}})
    with _classifier_hook(MemoryError, over=8) as raised:
        run_to_budget(study, objective, 2)
    assert raised == [16, 16]
    for trial in study.get_trials():
        assert trial.state == TrialState.PRUNED
        attrs = trial.user_attrs
        assert attrs["skip_reason"] == "oom" and attrs["oom_batch_size"] == 16 and "out of memory" in attrs["skip_detail"]
        assert "oom_fallback" not in attrs and attrs["hardware"]["device_type"] == "cpu"
        assert counts_toward_budget(trial)


def test_oom_fallback_retries_once_with_half_the_batch(tmp_path: Path) -> None:
    params = {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}}
    study, objective = _study(tmp_path, params, oom_fallback=True)
    with _classifier_hook(MemoryError, over=8) as raised:
        run_to_budget(study, objective, 1)
    (trial,) = study.get_trials()
    assert raised == [16] and trial.state == TrialState.COMPLETE
    # No artifact store, no checkpoint: it started over.
    assert trial.user_attrs["oom_fallback"] == {"from_batch_size": 16, "to_batch_size": 8, "grad_accum_steps": 2, "resumed_at_step": None}
    assert (trial.user_attrs["config"]["batch_size"], trial.user_attrs["config"]["grad_accum_steps"]) == (8, 2)
    assert trial.user_attrs["config"]["eval_batch_size"] == 4  # evaluation may be what ran out of memory: halved too
    assert "skip_reason" not in trial.user_attrs and math.isfinite(trial.value)

    # Out of memory again at half the batch: pruned as oom, with the retry recorded.
    with _classifier_hook(MemoryError, over=4) as raised:
        run_to_budget(study, objective, 2)
    last = study.get_trials()[-1]
    assert raised == [16, 8] and last.state == TrialState.PRUNED
    assert last.user_attrs["skip_reason"] == "oom" and last.user_attrs["oom_batch_size"] == 8
    assert last.user_attrs["oom_fallback"]["to_batch_size"] == 8


@pytest.mark.parametrize("length_grouping", [False, True])
def test_an_oom_fallback_after_an_evaluation_goes_on_from_its_checkpoint_and_lists_the_config_it_trained(
    tmp_path: Path, length_grouping: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    """Out of memory at step 2, after step 1 was evaluated, reported and checkpointed: the half batch trains the same rows
    per step, so the retry goes on from step 1 (it started over, and trained 3 steps again); with length grouping,
    batches of 8 hold other rows than halves of 16, and it starts over, said. The retry's own report of step 1 was
    refused by Optuna with a warning, and config.json (the only config artifact) named the batch that ran out."""
    from optuna.artifacts import FileSystemArtifactStore, download_artifact, get_all_artifact_meta

    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}},
                                "fixed": {**FIXED, "eval_every": 1, "length_grouping": length_grouping}, "oom_fallback": True})
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'f.db'}"), "f", space, DATA, seed=0)
    (tmp_path / "store").mkdir()
    store = FileSystemArtifactStore(str(tmp_path / "store"))
    objective = make_objective(space, DATA, base_seed=0, device="cpu", checkpoints=store)
    half_batches: list[int] = []

    def count_half_batches(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        if isinstance(module, torch.nn.Linear) and module.out_features == DATA.num_labels and module.training and output.shape[0] == 8:
            half_batches.append(8)

    counting = torch.nn.modules.module.register_module_forward_hook(count_half_batches)
    try:
        with _classifier_hook(MemoryError, over=8, after=1), warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="hpo"):
            warnings.simplefilter("error", UserWarning)  # Optuna's "already reported" would fail the run here
            run_to_budget(study, objective, 1)
    finally:
        counting.remove()
    (trial,) = study.get_trials()
    assert trial.state == TrialState.COMPLETE and sorted(trial.intermediate_values) == [1, 2, 3]
    fallback = {"from_batch_size": 16, "to_batch_size": 8, "grad_accum_steps": 2, "curve_from_first_attempt_until_step": 1}
    started_over = "batch_size=16, not 8; it cannot be resumed; it starts over from step 0" in caplog.text
    if length_grouping:
        assert trial.user_attrs["oom_fallback"] == {**fallback, "resumed_at_step": None} and len(half_batches) == 6 and started_over
    else:
        assert trial.user_attrs["oom_fallback"] == {**fallback, "resumed_at_step": 1} and len(half_batches) == 4 and not started_over
    artifacts = {meta.filename: meta.artifact_id for meta in get_all_artifact_meta(trial, storage=study._storage)}
    assert set(artifacts) == {"config.json", "config-oom-fallback.json"}
    download_artifact(artifact_store=store, file_path=str(tmp_path / "trained.json"), artifact_id=artifacts["config-oom-fallback.json"])
    trained = json.loads((tmp_path / "trained.json").read_text())
    assert (trained["batch_size"], trained["grad_accum_steps"]) == (8, 2) == (trial.user_attrs["config"]["batch_size"], 2)


def test_a_retry_of_a_trial_that_fell_back_starts_at_half_the_batch(tmp_path: Path) -> None:
    """Its predecessor's checkpoint was saved at half the batch: the retry must run that config to resume from it."""
    study, objective = _study(tmp_path, {"fp_precision": {"type": "categorical", "choices": ["fp32"]}}, oom_fallback=True)
    with _classifier_hook(MemoryError, over=8):
        run_to_budget(study, objective, 1)
    fell_back = study.get_trials()[0]
    # Re-queued as a worker that died mid-trial would be (Optuna's retry: the attrs copied, failed_trial set).
    study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, params=fell_back.params, distributions=fell_back.distributions,
                                              user_attrs=fell_back.user_attrs, system_attrs={"failed_trial": 0}))
    run_to_budget(study, objective, 2)
    retry = study.get_trials()[1]
    assert retry.state == TrialState.COMPLETE and retry.system_attrs["failed_trial"] == 0
    assert (retry.user_attrs["config"]["batch_size"], retry.user_attrs["config"]["grad_accum_steps"]) == (8, 2)
    assert retry.user_attrs["oom_fallback"] == fell_back.user_attrs["oom_fallback"]


def test_a_retry_keeps_its_predecessors_seed_whatever_seed_the_rerun_has(tmp_path: Path) -> None:
    """The seed was the rerun's --seed plus the original's number: rerun without the first run's --seed, the retry's
    config was another, its checkpoint refused, the trial failed for good (resume audit)."""
    study, _ = _study(tmp_path, {"fp_precision": {"type": "categorical", "choices": ["fp32"]}})
    run_to_budget(study, make_objective(parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}},
                                                            "fixed": FIXED}), DATA, base_seed=5, device="cpu"), 1)
    first = study.get_trials()[0]
    study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, params=first.params, distributions=first.distributions,
                                              user_attrs=first.user_attrs, system_attrs={"failed_trial": 0, "retry_history": [0]}))
    _, rerun_with_another_seed = _study(tmp_path, {"fp_precision": {"type": "categorical", "choices": ["fp32"]}})  # seed 0
    run_to_budget(study, rerun_with_another_seed, 2)
    retry = study.get_trials()[1]
    assert first.user_attrs["config"]["seed"] == 5 and retry.user_attrs["config"]["seed"] == 5
    assert retry.state == TrialState.COMPLETE and retry.value == first.value


def test_unexpected_error_fails_the_trial_with_a_one_line_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    study, objective = _study(tmp_path, {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}})
    with caplog.at_level(logging.ERROR, logger="hpo"), _classifier_hook(ValueError, times=1):
        run_to_budget(study, objective, 1)
    failed, complete = study.get_trials()
    assert failed.state == TrialState.FAIL and complete.state == TrialState.COMPLETE
    assert failed.user_attrs["fail_reason"] == "ValueError: injected: batch of 16 rows"
    assert not [v for v in failed.user_attrs.values() if "Traceback" in str(v)]
    assert failed.user_attrs["hardware"]["device_type"] == "cpu"
    # The traceback is in the worker's log, not in the study.
    (record,) = [r for r in caplog.records if r.name == "hpo.study._objective"]
    assert record.exc_info is not None and "Traceback" in caplog.text and "trial 0 failed" in record.getMessage()


def test_a_trial_whose_worker_died_claiming_it_is_failed_and_requeued_after_the_grace_period(tmp_path: Path) -> None:
    """Killed inside Optuna's ask (sampling): RUNNING, with no heartbeat to go stale and no worker identity to check."""
    import time

    from hpo.storage._storage import Heartbeat
    from hpo.study._liveness import fail_dead_local_trials, worker_identity

    storage = create_storage(f"sqlite:///{tmp_path / 'claim.db'}", heartbeat=Heartbeat(interval=1, grace_period=1))
    study = optuna.create_study(storage=storage, study_name="claim")
    orphan = study.ask()  # what the killed worker left: the claim committed, nothing after it
    live = study.ask()
    live.set_user_attr("worker", worker_identity(live.number, 3))  # a worker that got as far as its objective (this process)
    beating = study.ask()  # an objective of the caller's own (hpo.run_to_budget's), which writes no identity: it beats
    storage.record_heartbeat(beating._trial_id)
    assert fail_dead_local_trials(study, max_retry=3) == []  # not yet the grace period
    time.sleep(1.5)
    assert fail_dead_local_trials(study, max_retry=3) == [orphan.number]
    trials = study.get_trials()
    assert trials[orphan.number].state == TrialState.FAIL
    assert trials[live.number].state == trials[beating.number].state == TrialState.RUNNING
    assert trials[orphan.number].user_attrs["fail_reason"].startswith("worker_died: its worker died claiming it")
    assert [t.state for t in trials if t.system_attrs.get("failed_trial") == orphan.number] == [TrialState.WAITING]


def test_a_trial_failed_for_its_stale_heartbeat_says_why_on_its_line(tmp_path: Path) -> None:
    """Optuna's own sweep (before each trial, in any worker) fails a silent trial with no reason: its line said "see the log above"."""
    import time

    from hpo.reporting._run_lines import trial_line
    from hpo.storage._storage import Heartbeat

    storage = create_storage(f"sqlite:///{tmp_path / 'stale.db'}", heartbeat=Heartbeat(interval=1, grace_period=1))
    study = optuna.create_study(storage=storage, study_name="stale")
    silent = study.ask()  # its worker beat once, then died on another machine (no process here to find gone)
    storage.record_heartbeat(silent._trial_id)
    time.sleep(2.1)
    optuna.storages.fail_stale_trials(study)
    optuna.storages.fail_stale_trials(study)  # another worker's sweep, after this one's: nothing more to do, no error
    failed = study.get_trials()[silent.number]
    assert failed.state == TrialState.FAIL
    assert failed.user_attrs["fail_reason"] == "worker_died: no heartbeat for 1 s (the grace period)"
    assert trial_line(failed, ["accuracy"]).endswith("FAIL        (worker_died: no heartbeat for 1 s (the grace period))")


def test_a_trial_another_worker_failed_under_its_worker_is_left_to_its_retry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A database outage longer than the grace period: another worker's sweep fails a trial that still runs here."""
    storage = create_storage(f"sqlite:///{tmp_path / 'swept.db'}")
    study = optuna.create_study(storage=storage, study_name="swept")

    def objective(trial: optuna.Trial) -> float:
        if trial.number == 0:  # the sweep, as a worker starting after the outage does it: FAIL, then re-queued
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)(study, storage.get_trial(trial._trial_id))
            trial.report(0.5, 1)  # this worker, connected again, writes to a trial that has ended
        return 1.0

    with caplog.at_level(logging.WARNING, logger="hpo.study"):
        run_to_budget(study, objective, n_trials=2)
    assert [(t.number, t.state) for t in study.get_trials()] == [(0, TrialState.FAIL), (1, TrialState.COMPLETE), (2, TrialState.COMPLETE)]
    assert study.get_trials()[1].system_attrs["failed_trial"] == 0  # the retry ran here, and the budget is exact
    assert "was failed by another worker while this one could not reach the database" in caplog.text


class _AnotherWorkerTakesTheLastSlot(optuna.samplers.RandomSampler):
    """While this worker claims its trial (inside ask), another worker starts one and takes the budget's last slot."""

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        from hpo._attrs import BUDGET_SLOT_ATTR

        if trial.number == 0:
            other = study._storage.create_new_trial(study._study_id)
            study._storage.set_trial_user_attr(other, BUDGET_SLOT_ATTR, study._storage.get_trial(other).number)


def test_an_enqueued_trial_that_loses_the_last_slot_goes_back_to_the_queue(tmp_path: Path) -> None:
    study = optuna.create_study(storage=create_storage(f"sqlite:///{tmp_path / 'race.db'}"), study_name="race",
                                sampler=_AnotherWorkerTakesTheLastSlot())
    study.enqueue_trial({"x": 0.5}, user_attrs={"fp32_baseline": True})
    run_to_budget(study, lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    trials = study.get_trials()
    assert trials[0].state == TrialState.PRUNED and trials[0].user_attrs["skip_reason"] == "over_budget"
    assert trials[1].state == TrialState.RUNNING  # the other worker's
    # The baseline waits for the next worker or the next extension of the budget, with what made it the baseline.
    copy = trials[2]
    assert copy.state == TrialState.WAITING and copy.system_attrs["fixed_params"] == {"x": 0.5}
    assert copy.user_attrs == {"fp32_baseline": True}


def test_a_worker_does_not_wait_for_ever_on_a_trial_that_no_sweep_can_release(tmp_path: Path) -> None:
    """A grpc:// worker's trial from another machine holds the last slot: it never beats (the proxy keeps no heartbeats)
    and its process cannot be checked from here. A database worker waited on it for ever. One of this machine's is
    waited for: its process is seen to exit, and its trial is then re-queued and run here."""
    import subprocess
    import threading
    from datetime import datetime

    from hpo._attrs import BUDGET_SLOT_ATTR
    from hpo._process import process_key
    from hpo.storage._storage import Heartbeat
    from hpo.study._study import _room_for_a_trial

    storage = create_storage(f"sqlite:///{tmp_path / 'held.db'}", heartbeat=Heartbeat(interval=1, grace_period=1))
    study = optuna.create_study(storage=storage, study_name="held")

    def hold(worker: dict[str, Any]) -> FrozenTrial:
        trial = study.ask()
        trial.set_user_attr(BUDGET_SLOT_ATTR, trial.number)
        trial.set_user_attr("worker", {**worker, "trial": trial.number})
        return study.trials[trial.number]

    def room(n_trials: int) -> tuple[bool, datetime]:
        outcome: list[bool] = []
        stop = threading.Event()
        waiting = threading.Thread(target=lambda: outcome.append(_room_for_a_trial(study, n_trials, 3, lambda: not stop.is_set())))
        waiting.start()
        waiting.join(timeout=15)
        stop.set()  # (a worker that still waits is let go, so that the test ends)
        waiting.join()
        return outcome[0], datetime.now()

    elsewhere = hold({"host": "elsewhere", "pid": 7, "process": "another-boot/pid:[1]/7/1"})
    given_up, at = room(1)
    assert given_up is False and (at - elsewhere.datetime_start).total_seconds() < 15
    # Within the grace period its first beat may yet come: waited for that long.
    assert (at - elsewhere.datetime_start).total_seconds() >= 1.0
    assert study.trials[0].state == TrialState.RUNNING  # left to its own worker, or a rerun where it ran

    local = subprocess.Popen(["sleep", "3"])  # a grpc:// worker of this machine, which ends 3 s from now
    try:
        hold({"host": "here", "pid": local.pid, "process": process_key(local.pid)})
        found, _ = room(2)
    finally:
        local.kill()
        local.wait()
    assert found is True  # its process exited, its trial was failed and re-queued: room for it here
    assert [t.state for t in study.trials] == [TrialState.RUNNING, TrialState.FAIL, TrialState.WAITING]


def test_a_failed_trial_whose_requeue_was_lost_is_requeued_once_after_the_grace_period(tmp_path: Path) -> None:
    """A grpc:// worker stopped by SIGTERM marks its checkpointed trial FAIL, then re-queues it: the proxy went away
    between the two calls, and the checkpoint waited for no one. One of this project's trials that failed with no reason
    lost that write too; another objective's failure, with no reason either, is not this project's to retry."""
    import time

    from hpo.storage._storage import Heartbeat
    from hpo.study._liveness import worker_identity
    from hpo.study._study import _requeue_lost_retries

    storage = create_storage(f"sqlite:///{tmp_path / 'lost.db'}", heartbeat=Heartbeat(interval=1, grace_period=1))
    study = optuna.create_study(storage=storage, study_name="lost")

    def failed(reason: str | None, *, ours: bool = True) -> optuna.Trial:
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        if ours:  # this project's objective started it: it wrote its worker's identity first
            trial.set_user_attr("worker", worker_identity(trial.number, 3))
        if reason is not None:
            trial.set_user_attr("fail_reason", reason)
        trial.set_user_attr("checkpoint", f"trial-{trial.number}/step-40")
        study.tell(trial, state=TrialState.FAIL)
        return trial

    lost = failed("interrupted")
    failed("TrialFailedError: ValueError: boom")  # a failure of the trial itself: not re-queued by the run
    unmarked = failed(None)  # its reason's write was lost too
    failed(None, ours=False)  # another objective's failure (run_to_budget is public): Optuna writes no reason
    requeued = failed("worker_died: its worker process exited mid-trial")
    optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)(study, study.trials[requeued.number])  # as its sweep did
    _requeue_lost_retries(study, max_retry=3)
    assert len(study.trials) == 6  # within the grace period: its worker's own re-queue may still be on its way
    time.sleep(1.5)
    _requeue_lost_retries(study, max_retry=3)
    _requeue_lost_retries(study, max_retry=3)  # once
    retries = study.trials[6:]  # trial 5 is the retry of the worker_died trial
    assert [retry.system_attrs["failed_trial"] for retry in retries] == [lost.number, unmarked.number]
    for retry in retries:
        failed_trial = study.trials[retry.system_attrs["failed_trial"]]
        assert retry.state == TrialState.WAITING and retry.params == failed_trial.params
        assert retry.user_attrs["checkpoint"] == f"trial-{failed_trial.number}/step-40"


def test_a_trial_is_retried_as_its_own_worker_allowed_whichever_worker_finds_it_failed(tmp_path: Path) -> None:
    """Workers of one study started with different --max-retry: a trial's retries were decided by the worker whose sweep
    found it (a stale heartbeat, a lost re-queue), so a --max-retry 0 worker's trial was retried by another's sweep, and
    the other way round. The trial's own worker's limit decides; a trial that recorded none takes the sweeping run's."""
    import time

    from hpo.storage._storage import Heartbeat
    from hpo.study._liveness import worker_identity
    from hpo.study._study import _requeue_lost_retries

    url = f"sqlite:///{tmp_path / 'mixed.db'}"
    study = optuna.create_study(storage=create_storage(url, heartbeat=Heartbeat(interval=1, grace_period=1)), study_name="mixed")

    def running(max_retry: int | None, *, recorded: bool = True) -> optuna.Trial:
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        identity = worker_identity(trial.number, max_retry)
        if not recorded:  # written by an earlier version, which recorded no limit
            del identity["max_retry"]
        trial.set_user_attr("worker", identity)
        return trial

    def swept_by(max_retry: int, stale: list[optuna.Trial]) -> None:
        """``stale``'s workers beat once and died; a worker started with --max-retry ``max_retry`` sweeps."""
        for trial in stale:
            study._storage.record_heartbeat(trial._trial_id)
        time.sleep(2.1)
        view = optuna.load_study(study_name="mixed", storage=create_storage(url, heartbeat=Heartbeat(1, 1, max_retry)))
        optuna.storages.fail_stale_trials(view)
        assert all(study._storage.get_trial(t._trial_id).state == TrialState.FAIL for t in stale)

    def retried() -> list[int]:  # the trials the waiting retries retry
        return [t.system_attrs["retry_history"][-1] for t in study.get_trials() if t.state == TrialState.WAITING]

    def died(max_retry: int) -> optuna.Trial:  # failed with its worker dead, its re-queue lost (the lost-retry sweep's case)
        trial = running(max_retry)
        trial.set_user_attr("fail_reason", "worker_died: its process exited")
        study.tell(trial, state=TrialState.FAIL)
        return trial

    # All claimed first: a retry re-queued is what the next ask takes.
    no_retry, unrecorded, two_retries, unlimited, unrecorded_0 = (
        running(0), running(None, recorded=False), running(2), running(None), running(None, recorded=False))
    kept, allowed = died(0), died(1)
    swept_by(3, [no_retry, unrecorded])
    assert retried() == [unrecorded.number]  # its own worker's 0 stands; one that recorded none: the sweeper's 3
    swept_by(0, [two_retries, unlimited, unrecorded_0])
    assert retried() == [unrecorded.number, two_retries.number, unlimited.number]
    time.sleep(1.1)  # past the grace period since the last sweep failed its trials: their re-queues count as lost
    _requeue_lost_retries(study, max_retry=0)
    assert retried()[3:] == [allowed.number]
    _requeue_lost_retries(study, max_retry=3)  # kept's own 0 stands; unrecorded_0's stale sweep ran under 0, this one 3
    assert retried()[3:] == [allowed.number, unrecorded_0.number] and kept.number not in retried()


def test_a_retry_that_loses_the_last_slot_goes_back_with_its_params(tmp_path: Path) -> None:
    """A retry carries its params (and its predecessor's checkpoint): the copy put back lost them, so that any worker,
    a --fix one included, sampled new ones and resumed the old checkpoint with them."""
    study = optuna.create_study(storage=create_storage(f"sqlite:///{tmp_path / 'retry.db'}"), study_name="retry",
                                sampler=_AnotherWorkerTakesTheLastSlot())
    study.add_trial(optuna.trial.create_trial(  # as RetryFailedTrialCallback re-queues a failed trial
        state=TrialState.WAITING, params={"x": 0.25}, distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
        system_attrs={"failed_trial": 7, "retry_history": [7]}))
    run_to_budget(study, lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    copy = study.get_trials()[2]
    assert copy.state == TrialState.WAITING and copy.params == {"x": 0.25} and copy.system_attrs["failed_trial"] == 7


def _second_signal() -> None:
    raise KeyboardInterrupt  # as StopSignal's handler raises it


def _second_signal_under_another_error() -> None:
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:  # an __exit__ that fails while it unwinds (Optuna's tell, a CUDA-graph capture's end)
        raise RuntimeError("operation failed while the interrupt unwound")  # noqa: B904


@pytest.mark.parametrize("signal", [_second_signal, _second_signal_under_another_error], ids=["plain", "under-another-error"])
def test_a_second_signal_fails_the_trial_at_once_and_its_retry_resumes_from_its_last_checkpoint(
    tmp_path: Path, signal: Any,
) -> None:
    """A second Ctrl-C: the trial was failed with no reason and not re-queued, its last checkpoint marked for removal;
    a rerun started another trial from step 0 (and an error raised over the interrupt let the run go on). Now it is
    failed ``interrupted`` and re-queued once, and resumes."""
    from optuna.artifacts import FileSystemArtifactStore

    from hpo._attrs import CHECKPOINT_ATTR, fail_reason_of
    from hpo.study._study import _requeue_once

    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}},
                                "fixed": {**FIXED, "max_steps": 6, "eval_every": 2}})
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'f.db'}"), "f", space, DATA, seed=0)
    (tmp_path / "store").mkdir()
    store = FileSystemArtifactStore(str(tmp_path / "store"))
    polls = [0]

    def stop_requested() -> bool:  # the second signal lands at the 6th poll: after step 5's, checkpointed at step 4
        polls[0] += 1
        if polls[0] == 6:
            signal()
        return False

    objective = make_objective(space, DATA, base_seed=0, device="cpu", checkpoints=store, stop_requested=stop_requested)
    with pytest.raises(KeyboardInterrupt):
        run_to_budget(study, objective, 1, stop_requested=stop_requested)
    failed, retry = study.get_trials()
    assert failed.state == TrialState.FAIL and fail_reason_of(failed) == "interrupted"
    pointer = failed.user_attrs[CHECKPOINT_ATTR]
    assert pointer["step"] == 4 and "removed_when_told" not in pointer and (tmp_path / "store" / pointer["artifact_id"]).exists()
    assert retry.state == TrialState.WAITING and retry.system_attrs["failed_trial"] == failed.number
    _requeue_once(study, failed, None)  # as the lost-retry sweep or another worker would try: never a second retry
    assert len(study.get_trials()) == 2

    rerun = make_objective(space, DATA, base_seed=0, device="cpu", checkpoints=store)
    run_to_budget(study, rerun, 1, on_told=rerun.told)
    resumed = study.get_trials()[1]
    assert resumed.state == TrialState.COMPLETE and resumed.user_attrs["resumed_at_step"] == 4
    assert not list((tmp_path / "store").glob("checkpoint-*"))  # told: removed


def test_a_second_signal_whose_mark_and_requeue_are_both_lost_is_requeued_by_the_next_run_and_resumes(tmp_path: Path) -> None:
    """The storage refused both writes after a second signal (the ``interrupted`` mark, then the retry): the trial stayed
    FAIL with no reason, which no sweep re-queued, and its checkpoint waited for no one. A rerun past the grace period now
    re-queues it and resumes its checkpoint."""
    import time

    import sqlalchemy
    from optuna.artifacts import FileSystemArtifactStore

    from hpo._attrs import FAIL_REASON_ATTR
    from hpo.storage._storage import Heartbeat

    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}},
                                "fixed": {**FIXED, "max_steps": 6, "eval_every": 2}})
    storage = create_storage(f"sqlite:///{tmp_path / 'f.db'}", heartbeat=Heartbeat(interval=1, grace_period=1))
    study = open_study(storage, "f", space, DATA, seed=0)
    (tmp_path / "store").mkdir()
    store = FileSystemArtifactStore(str(tmp_path / "store"))
    refused: list[str] = []

    def refuse(connection: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        values = parameters.values() if isinstance(parameters, dict) else parameters or ()
        if (("trial_user_attributes" in statement and json.dumps("interrupted") in values)
                or statement.startswith("INSERT INTO trials ")):  # the mark, then the retry's row
            refused.append(statement)
            raise RuntimeError("the database refused the write")

    def stop_requested() -> bool:  # the second signal lands at the 6th poll, checkpointed at step 4
        stop_requested.polls += 1  # type: ignore[attr-defined]
        if stop_requested.polls == 6:  # type: ignore[attr-defined]
            sqlalchemy.event.listen(sqlalchemy.Engine, "before_cursor_execute", refuse)
            raise KeyboardInterrupt
        return False

    stop_requested.polls = 0  # type: ignore[attr-defined]
    objective = make_objective(space, DATA, base_seed=0, device="cpu", checkpoints=store, stop_requested=stop_requested)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_to_budget(study, objective, 1, stop_requested=stop_requested)
    finally:
        sqlalchemy.event.remove(sqlalchemy.Engine, "before_cursor_execute", refuse)
    [failed] = study.get_trials()
    assert len(refused) == 2 and failed.state == TrialState.FAIL and FAIL_REASON_ATTR not in failed.user_attrs

    time.sleep(1.5)  # past the grace period: no worker's own re-queue is still on its way
    rerun = make_objective(space, DATA, base_seed=0, device="cpu", checkpoints=store)
    run_to_budget(study, rerun, 1, on_told=rerun.told)
    _, resumed = study.get_trials()
    assert resumed.system_attrs["failed_trial"] == failed.number
    assert resumed.state == TrialState.COMPLETE and resumed.user_attrs["resumed_at_step"] == 4


def test_a_second_signal_in_optunas_tell_leaves_its_trial_failed_and_requeued_not_running(tmp_path: Path) -> None:
    """The interrupt landed in Optuna's tell (it then raises UnboundLocalError over it): the trial stayed RUNNING until
    a heartbeat sweep or a rerun on this machine. The worker fails and re-queues its own trial, once."""
    from hpo._attrs import fail_reason_of
    from hpo.study._study import _requeue_interrupted

    study, _ = _study(tmp_path, {"fp_precision": {"type": "categorical", "choices": ["fp32"]}})
    running = study.ask()
    _requeue_interrupted(study, running._trial_id, None)
    _requeue_interrupted(study, running._trial_id, None)  # a later attempt at it: no second retry
    failed, retry = study.get_trials()
    assert failed.state == TrialState.FAIL and fail_reason_of(failed).startswith("worker_died: its worker was stopped by a second signal")
    assert retry.state == TrialState.WAITING and retry.system_attrs["failed_trial"] == failed.number
