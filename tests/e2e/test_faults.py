"""Faults of issue 13 in real processes: a SIGKILLed worker rerun at once, Ctrl-C, checkpoints that cannot be written.

Each leaves no trial RUNNING once the next worker finishes and loses no work beyond the last
checkpoint: a checkpoint that cannot be written costs the checkpoint, never the trial.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _read_only import ReadOnlyDirectory
from conftest import ROOT, cli_args
from optuna.trial import FrozenTrial, TrialState
from test_workers import LONG_TRIALS, _assert_resumed, _held_with_checkpoint, _space, _trials

from hpo.cli._run import main as run_main

ONE_TRIAL = {**LONG_TRIALS, "fixed": {**LONG_TRIALS["fixed"], "epochs": 1}}  # checkpoints at steps 10, 20, 30, 40
# The tests that strike once a checkpoint is seen (a kill, a Ctrl-C, a read-only store) hold the trial there with its
# worker stopped (_held_with_checkpoint); two epochs leave it steps to train after all but its last checkpoints.
TWO_EPOCHS = {**LONG_TRIALS, "fixed": {**LONG_TRIALS["fixed"], "epochs": 2}}  # checkpoints at steps 10, 20, ..., 80


def _start(args: list[str], cwd: Path, extra_env: dict[str, str] | None = None, **popen: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(extra_env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "hpo.run", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )


def _status(url: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    status = subprocess.run([sys.executable, "-m", "hpo.status", "--storage", url], capture_output=True, text=True, env=env, timeout=120)
    assert status.returncode == 0, status.stderr
    return status.stdout


def _not_running(trials: list[FrozenTrial]) -> None:
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]


@pytest.mark.postgres
def test_a_sigkilled_worker_rerun_at_once_with_default_settings_recovers_its_trial(
    pg_database: str, small_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Default heartbeat settings: a beat every 30 s, stale after 120 s; the rerun takes far less.
    args = cli_args(pg_database, _space(tmp_path, TWO_EPOCHS), small_data, "--study-name", "killed", "--n-trials", "2",
                    "--artifact-store", str(tmp_path / "artifacts"))
    temp = tmp_path / "temp"  # the workers' temp directory: the killed one's scratch must not outlive it for good
    temp.mkdir()
    worker = _start(args, tmp_path, {"TMPDIR": str(temp)})
    try:
        with _held_with_checkpoint(pg_database, "killed", lambda _: worker.pid) as victim:
            worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        worker.kill()
    before = _status(pg_database)
    assert f"running: trial {victim.number} on " in before and "its worker process is gone" in before, before
    left = sorted(p.name for p in temp.glob(f"hpo-trial-{victim.number}-*"))
    assert left and any((temp / name / "latest").exists() for name in left), left  # its checkpoints, written there
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    assert run_main(args) == 0  # the rerun: in this process, which has torch loaded already
    assert not list(temp.glob("hpo-trial-*"))  # the dead worker's scratch removed, the rerun's own cleaned up
    trials = _trials(pg_database, "killed")
    _not_running(trials)
    dead = next(t for t in trials if t.number == victim.number)
    assert dead.state == TrialState.FAIL and dead.user_attrs["fail_reason"].startswith("worker_died")
    _assert_resumed(next(t for t in trials if t.system_attrs.get("failed_trial") == victim.number), victim)
    after = _status(pg_database)
    assert "running:" not in after and "running 0" in after, after


def test_ctrl_c_ends_the_run_with_one_line_and_requeues_the_trial(small_data: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    # Two epochs: on a loaded machine a one-epoch trial can pass its last 35 steps before the signal lands,
    # and end COMPLETE (interrupted, it never trains the second epoch).
    args = cli_args(url, _space(tmp_path, TWO_EPOCHS), small_data, "--study-name", "ctrl-c", "--n-trials", "2",
                    "--artifact-store", str(tmp_path / "artifacts"))
    worker = _start(args, tmp_path, start_new_session=True)
    try:
        with _held_with_checkpoint(url, "ctrl-c", lambda _: worker.pid):
            os.killpg(worker.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        out, err = worker.communicate(timeout=120)
    finally:
        worker.kill()
    assert worker.returncode == 130, err
    assert "Traceback" not in out + err
    trials = _trials(url, "ctrl-c")
    _not_running(trials)
    interrupted = next(t for t in trials if t.state == TrialState.FAIL)
    assert interrupted.user_attrs["fail_reason"] == "interrupted"
    assert err.strip().splitlines() == [
        f"python -m hpo.run: stopped by a signal; trial {interrupted.number} was checkpointed and re-queued: "
        "rerun the same command to resume the study"
    ]
    assert [t.state for t in trials if t.system_attrs.get("failed_trial") == interrupted.number] == [TrialState.WAITING]


def test_an_artifact_store_turning_read_only_mid_run_costs_checkpoints_not_the_trial(small_data: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    with ReadOnlyDirectory(tmp_path / "artifacts") as store:
        args = cli_args(url, _space(tmp_path, TWO_EPOCHS), small_data, "--study-name", "ro", "--n-trials", "2", "--artifact-store", str(store.path))
        worker = _start(args, tmp_path)
        try:
            with _held_with_checkpoint(url, "ro", lambda _: worker.pid) as first:
                store.freeze()
            out, err = worker.communicate(timeout=300)
        finally:
            worker.kill()
    assert worker.returncode == 0, err[-3000:]
    assert "Traceback" not in out + err
    trials = _trials(url, "ro")
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    warnings = [line for line in err.splitlines() if "not saved to the artifact store" in line]
    assert warnings and warnings[0].startswith(f"trial {first.number}: checkpoint at step "), err
    # One warning per trial at most; the second trial could not even store its config.
    assert len([w for w in warnings if w.startswith(f"trial {first.number}:")]) == 1
    assert any("runs without checkpoints: the artifact store cannot be written" in line for line in err.splitlines()), err


@pytest.mark.postgres
def test_a_full_disk_costs_the_checkpoints_not_the_trial(pg_database: str, small_data: Path, tmp_path: Path) -> None:
    # Files of at most 1 MB: the tokenized data fits, a checkpoint (model and Adam state) does not.
    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))

    args = cli_args(pg_database, _space(tmp_path, ONE_TRIAL), small_data, "--study-name", "full", "--n-trials", "1",
                    "--artifact-store", str(tmp_path / "artifacts"))
    worker = _start(args, tmp_path, preexec_fn=small_files)
    out, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err[-3000:]
    assert "Traceback" not in out + err
    (trial,) = _trials(pg_database, "full")
    assert trial.state == TrialState.COMPLETE and not trial.user_attrs.get("checkpoint")
    warnings = [line for line in err.splitlines() if "not saved" in line]
    assert len(warnings) == 1 and "the run goes on without it" in warnings[0], err
