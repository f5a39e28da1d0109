"""Workers in real processes on real PostgreSQL: killed, interrupted, started together, database restarted."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from _private_postgres import PrivatePostgres
from conftest import ROOT, SMALL_SPACE, cli_args
from optuna.trial import FrozenTrial, TrialState

from hpo.cli._run import main as run_main
from hpo.study import counts_toward_budget

pytestmark = pytest.mark.postgres

# Trials of 180 steps that checkpoint every 10: long enough to be caught mid-run. With 90 (two epochs), a
# trial ran in about a second on a quiet machine, less than a poll of the database took on a busy one:
# it had completed when the signal landed.
LONG_TRIALS = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {"learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True}},
    "fixed": {"model": "tiny-bert", "epochs": 4, "batch_size": 16, "max_length": 48, "eval_every": 10},
}
FAST_HEARTBEAT = ["--heartbeat-interval", "1", "--grace-period", "3"]
SMALL_DATA_TRAIN_ROWS = 720  # conftest's small_data: 800 rows, less the 10 % hold-out


def _space(tmp_path: Path, space: dict[str, Any]) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def _start(args: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "hpo.run", *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _trials(url: str, name: str) -> list[FrozenTrial]:
    storage = optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    try:
        return optuna.load_study(study_name=name, storage=storage).get_trials()
    finally:
        storage.engine.dispose()


def _wait_for(url: str, name: str, found: Callable[[FrozenTrial], bool], timeout: float = 240) -> FrozenTrial:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            for trial in _trials(url, name):
                if found(trial):
                    return trial
        except KeyError:
            pass  # the study is not created yet
        time.sleep(0.2)
    raise AssertionError(f"no trial of {name!r} matched within {timeout} s")


def _running_with_checkpoint(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.RUNNING and bool(trial.user_attrs.get("checkpoint"))


def _checkpointed_with_steps_left(trial: FrozenTrial) -> bool:
    """Running, with a checkpoint before its last one: its worker has steps left to train. A worker held at its last one
    may be past its last step, in the final evaluation, where a Ctrl-C or SIGTERM no longer interrupts the trial (it
    completed: no trial to re-queue) and a killed trial's retry has nothing left to train."""
    if not _running_with_checkpoint(trial):
        return False
    config = trial.user_attrs["config"]
    total = min(config["epochs"] * math.ceil(SMALL_DATA_TRAIN_ROWS / config["batch_size"]), config["max_steps"] or math.inf)
    last_checkpoint = (total - 1) // config["eval_every"] * config["eval_every"]
    return trial.user_attrs["checkpoint"]["step"] < last_checkpoint


@contextlib.contextmanager
def _held_with_checkpoint(url: str, name: str, pid_of: Callable[[FrozenTrial], int], timeout: float = 240) -> Iterator[FrozenTrial]:
    """A trial running with a checkpoint and steps left to train, held there: its worker (``pid_of(trial)``) is stopped
    (SIGSTOP) until the block ends (SIGCONT). Between a read of the database and a signal, a fast machine's trial could pass
    its last checkpoint or end (92 steps took 0.75 s on a 2-core EPYC): the trial is read again once its worker is stopped.
    A signal sent in the block lands when it ends; SIGKILL lands at once."""
    deadline = time.monotonic() + timeout
    while True:
        seen = _wait_for(url, name, _checkpointed_with_steps_left, timeout=max(1.0, deadline - time.monotonic()))
        pid = pid_of(seen)
        os.kill(pid, signal.SIGSTOP)
        try:
            held = next((t for t in _trials(url, name) if t.number == seen.number), None)
        except Exception:  # SQLite: the worker was stopped inside a write
            held = None
        if held is not None and _checkpointed_with_steps_left(held):
            break
        os.kill(pid, signal.SIGCONT)
    try:
        yield held
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _finished(trials: list[FrozenTrial]) -> int:
    return sum(counts_toward_budget(t) for t in trials)


def _assert_resumed(retry: FrozenTrial, original: FrozenTrial) -> None:
    assert retry.state == TrialState.COMPLETE
    assert retry.user_attrs["resumed_from_trial"] == original.number
    resumed_at = retry.user_attrs["resumed_at_step"]
    assert resumed_at > 0
    # Its learning curve whole for a pruner: its predecessor's evaluations (they lacked before), then its own.
    assert original.intermediate_values and all(retry.intermediate_values.get(s) == v for s, v in original.intermediate_values.items())
    assert max(retry.intermediate_values) > resumed_at
    assert retry.params == original.params


def test_a_killed_worker_trial_is_retried_from_its_checkpoint(pg_database: str, small_data: Path, tmp_path: Path) -> None:
    """One worker of --workers 2 SIGKILLed mid-trial (as the OOM killer would): the other retries its trial from the
    checkpoint and finishes the budget. The launcher exited 137 with nothing said; it names the worker now. A budget of 2:
    the survivor finishes its own trial, waits while the dead worker's trial holds the rest of the budget, and retries it
    once the heartbeat goes stale (with 4 it then trained the two trials left alone: 26.0 s against 21.8 s, run alone)."""
    args = cli_args(pg_database, _space(tmp_path, LONG_TRIALS), small_data, "--study-name", "kill", "--n-trials", "2",
                    "--artifact-store", str(tmp_path / "artifacts"), "--workers", "2", "--max-retry", "2", *FAST_HEARTBEAT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    launcher = subprocess.Popen([sys.executable, "-m", "hpo.run", *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        with _held_with_checkpoint(pg_database, "kill", lambda t: t.user_attrs["worker"]["pid"]) as victim:
            os.kill(victim.user_attrs["worker"]["pid"], signal.SIGKILL)
        out, err = launcher.communicate(timeout=600)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, err[-3000:]
    assert re.search(r"^python -m hpo\.run: worker [01] exited with signal 9 \(SIGKILL\)$", err, re.MULTILINE), err
    # Whatever else a worker says on stderr comes with its index, as its stdout lines do.
    assert all(line.startswith(("[worker ", "python -m hpo.run: worker ")) for line in err.splitlines()), err
    assert "2 of 2 budgeted trials finished" in out and "Traceback" not in out + err
    trials = _trials(pg_database, "kill")
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    assert _finished(trials) == 2
    assert next(t for t in trials if t.number == victim.number).state == TrialState.FAIL
    assert victim.user_attrs["worker"]["max_retry"] == 2  # its retry policy, whichever worker finds it dead
    retry = next(t for t in trials if t.system_attrs.get("failed_trial") == victim.number)
    _assert_resumed(retry, victim)
    # Each trial lists one artifact, its config.json (a retry its predecessor's); finished trials leave
    # no checkpoint behind, and nothing listed is missing from the store (the dashboard would 404).
    listed = {
        t.number: [json.loads(value) for key, value in t.system_attrs.items() if key.startswith("artifacts:")]
        for t in trials if t.state != TrialState.WAITING
    }
    assert all([meta["filename"] for meta in metas] == ["config.json"] for metas in listed.values()), listed
    assert listed[retry.number] == listed[victim.number]
    # Besides them, the store keeps one file: the study's best model (hpo.storage._best_model).
    best_model = optuna.load_study(study_name="kill", storage=pg_database).user_attrs["best_model"]
    assert best_model["trial"] in {t.number for t in trials if t.state == TrialState.COMPLETE}
    expected = {m["artifact_id"] for metas in listed.values() for m in metas} | {best_model["artifact_id"]}
    assert {p.name for p in (tmp_path / "artifacts").iterdir()} == expected


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_workers_stop_with_their_launcher_killed_or_signalled_and_leave_their_trials_to_a_rerun(
    pg_database: str, small_data: Path, tmp_path: Path,
) -> None:
    """The launcher of --workers 2 SIGKILLed (the OOM killer's pick, a kill -9): its workers, each in a session of its own,
    trained on to the end of the budget with no one to relay their lines and out of reach of a Ctrl-C. Each now stops
    as on SIGTERM: its trial checkpointed, failed `interrupted` and re-queued for a rerun. The rerun's launcher given
    SIGTERM: its workers stop so and say so, and it no longer adds that each of them "exited with signal 15"."""
    args = cli_args(pg_database, _space(tmp_path, LONG_TRIALS), small_data, "--study-name", "orphans", "--n-trials", "4",
                    "--artifact-store", str(tmp_path / "artifacts"), "--workers", "2", *FAST_HEARTBEAT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    launcher = subprocess.Popen([sys.executable, "-m", "hpo.run", *args], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    workers: list[int] = []
    try:
        with _held_with_checkpoint(pg_database, "orphans", lambda t: t.user_attrs["worker"]["pid"]) as victim:
            workers = _children(launcher.pid)
            assert len(workers) == 2 and victim.user_attrs["worker"]["pid"] in workers
            launcher.kill()
            launcher.wait(timeout=10)
        deadline = time.monotonic() + 90
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [pid for pid in workers if _alive(pid)], "a worker trained on with its launcher gone"
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        launcher.kill()
    trials = _trials(pg_database, "orphans")
    assert _finished(trials) < 4 and not [t for t in trials if t.state == TrialState.RUNNING]
    stopped = next(t for t in trials if t.number == victim.number)
    assert stopped.state == TrialState.FAIL and stopped.user_attrs["fail_reason"] == "interrupted"
    assert [t.state for t in trials if t.system_attrs.get("failed_trial") == victim.number] == [TrialState.WAITING]

    rerun = subprocess.Popen([sys.executable, "-m", "hpo.run", *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(pg_database, "orphans", lambda t: _running_with_checkpoint(t) and t.number > victim.number)
        rerun.send_signal(signal.SIGTERM)
        out, err = rerun.communicate(timeout=120)
    finally:
        rerun.kill()
    assert rerun.returncode == 143 and "(interrupted)" in out, err[-3000:]
    assert err and all(re.match(r"\[worker [01]\] python -m hpo\.run: stopped by a signal", line) for line in err.splitlines()), err
    assert not [t for t in _trials(pg_database, "orphans") if t.state == TrialState.RUNNING]


def test_sigterm_checkpoints_fails_and_requeues_the_trial_then_a_rerun_resumes_it(
    pg_database: str, small_data: Path, tmp_path: Path
) -> None:
    args = cli_args(pg_database, _space(tmp_path, LONG_TRIALS), small_data, "--study-name", "term", "--n-trials", "2",
                    "--artifact-store", str(tmp_path / "artifacts"))
    worker = _start(args, tmp_path, tmp_path / "worker.log")
    try:
        with _held_with_checkpoint(pg_database, "term", lambda _: worker.pid):
            worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=120) == 143
    finally:
        worker.kill()
    trials = _trials(pg_database, "term")
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    interrupted = next(t for t in trials if t.state == TrialState.FAIL)
    assert interrupted.user_attrs["fail_reason"] == "interrupted" and interrupted.user_attrs["interrupted_at_step"] > 0
    assert [t.state for t in trials if t.system_attrs.get("failed_trial") == interrupted.number] == [TrialState.WAITING]
    assert "rerun the same command" in (tmp_path / "worker.log").read_text()

    assert run_main(args) == 0  # the rerun: in this process, which has torch loaded already
    trials = _trials(pg_database, "term")
    assert _finished(trials) == 2 and not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    _assert_resumed(next(t for t in trials if t.system_attrs.get("failed_trial") == interrupted.number), interrupted)


def test_workers_started_together_on_a_fresh_database_keep_the_budget_then_share_the_verdict(
    pg_database: str, small_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Trials of three steps: the test is about starting together, the shared budget and what is printed once.
    space = _space(tmp_path, {**SMALL_SPACE, "fixed": {**SMALL_SPACE["fixed"], "max_steps": 3, "eval_every": 0}})
    args = cli_args(pg_database, space, small_data, "--study-name", "four", "--n-trials", "6", "--workers", "2", "--gpus", "0,1",
                    "--verdict", "2")
    monkeypatch.chdir(tmp_path)  # the default artifact store, relative to where the command runs
    code = run_main(args)  # the launcher in this process, which has torch loaded already; the workers are processes
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    trials = _trials(pg_database, "four")
    assert _finished(trials) == 6  # exactly: a worker starts a trial only while the budget has room (hpo.study._study)
    # 2 seeds x the 3 precisions a CPU runs, shared by the workers, each run once.
    verdict = [t.user_attrs["verdict_trial"] for t in trials if "verdict_trial" in t.user_attrs and t.state == TrialState.COMPLETE]
    assert sorted((v["precision"], v["seed_index"]) for v in verdict) == [(p, i) for p in ("bf16", "fp16", "fp32") for i in (0, 1)]
    # Each worker prints its own trials; the command says once where the study starts, how it ended, and the
    # verdict's cost (worker 0) and table, after every worker's last line.
    assert out.count("0 of 6 budgeted trials already finished") == 1 and out.count("Verdict of trial") == 1
    assert out.count("6 of 6 budgeted trials finished") == 1 and out.count("Best trial") == 1 and out.count("| precision |") == 1
    assert out.rindex("[worker ") < out.index("6 of 6 budgeted trials finished") < out.index("| precision |")
    assert "- tf32: not run: " in out
    # The best is the search's, the trial the verdict re-trained (never a verdict trial that scored higher), and so is its kept model.
    best = int(re.search(r"^Best trial (\d+):", out, re.MULTILINE).group(1))
    assert f"Verdict of trial {best}:" in out and "verdict_trial" not in next(t for t in trials if t.number == best).user_attrs
    assert optuna.load_study(study_name="four", storage=pg_database).user_attrs["best_model"]["trial"] == best
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert sum(bool(t.user_attrs.get("fp32_baseline")) for t in trials) == 1
    workers = [t.user_attrs["worker"] for t in trials if "worker" in t.user_attrs]
    assert len({w["pid"] for w in workers}) > 1
    # Worker i sees only GPU i mod 2 (CUDA_VISIBLE_DEVICES), whichever workers got trials.
    assert {w["gpus"] for w in workers} <= {"0", "1"}


def test_a_study_completes_across_a_database_restart(private_postgres: PrivatePostgres, small_data: Path, tmp_path: Path) -> None:
    # Whole epochs (no max_steps): trials long enough for one to run through the outage.
    whole_epochs = {k: v for k, v in SMALL_SPACE["fixed"].items() if k != "max_steps"}
    space = _space(tmp_path, {**SMALL_SPACE, "fixed": {**whole_epochs, "epochs": 2}})
    # Three trials: one finished before the outage, one running through it, one started after it.
    args = cli_args(private_postgres.url, space, small_data, "--study-name", "restart", "--n-trials", "3")
    worker = _start(args, tmp_path, tmp_path / "worker.log")
    try:
        _wait_for(private_postgres.url, "restart", lambda t: t.state == TrialState.COMPLETE)
        private_postgres.stop()
        time.sleep(4)
        private_postgres.start()
        assert worker.wait(timeout=300) == 0, (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        worker.kill()
    trials = _trials(private_postgres.url, "restart")
    assert _finished(trials) == 3
    failed = [(t.number, t.state.name, t.user_attrs.get("fail_reason")) for t in trials if t.state in (TrialState.RUNNING, TrialState.FAIL)]
    assert not failed, (failed, (tmp_path / "worker.log").read_text()[-3000:])


def test_workers_that_say_why_they_stopped_are_not_named_again_by_their_launcher(small_data: Path, tmp_path: Path) -> None:
    """The SQLite file deleted under two workers: each says so in its one line, and the launcher adds nothing (it added
    "worker i exited with code 1" for each, then the error a third time from its own read of the study)."""
    url = f"sqlite:///{tmp_path / 'gone.db'}"
    args = cli_args(url, _space(tmp_path, LONG_TRIALS), small_data, "--study-name", "gone", "--n-trials", "4", "--workers", "2",
                    "--artifact-store", str(tmp_path / "artifacts"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen([sys.executable, "-m", "hpo.run", *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(url, "gone", lambda t: t.state == TrialState.RUNNING)
        (tmp_path / "gone.db").unlink()
        _, err = run.communicate(timeout=240)
    finally:
        run.kill()
    lines = err.strip().splitlines()
    assert run.returncode == 1 and lines and all(re.match(r"\[worker [01]\] python -m hpo\.run: error: SQLite database ", line) for line in lines), err
