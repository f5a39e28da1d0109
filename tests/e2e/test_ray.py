"""Studies on a real local Ray cluster (issue 26): the workers are Ray actors, PostgreSQL the one source of truth.

One Ray cluster (2 CPUs, 2 declared GPUs: Ray schedules GPU reservations on a CPU machine
too) serves the whole module; the CLI drivers connect to it by address, as on a real cluster.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import ROOT, SMALL_SPACE, cli_args, run_cli
from optuna.trial import FrozenTrial, TrialState
from test_workers import LONG_TRIALS, _assert_resumed, _held_with_checkpoint, _running_with_checkpoint, _space, _trials, _wait_for

import hpo
from hpo._api import WorkerJob, resolve_data, resolve_space, run_job
from hpo._attrs import is_verdict_trial, stored_verdict
from hpo.cli._run import main as run_main
from hpo.reporting._report import build_report
from hpo.storage._storage import StorageError
from hpo.study import RunOptions, counts_toward_budget
from hpo.study._ray_cluster import plan
from hpo.study._ray_workers import connect, refuse_shared_sqlite, start_workers, wait_for_workers

# Same xdist worker for every test here: one Ray cluster, started once (seconds on two cores).
pytestmark = [pytest.mark.postgres, pytest.mark.xdist_group("ray")]
TINY = {**SMALL_SPACE, "params": {k: v for k, v in SMALL_SPACE["params"].items() if k in ("fp_precision", "learning_rate")},
        "fixed": {**SMALL_SPACE["fixed"], "model": "tiny-bert", "batch_size": 16, "max_steps": 3, "eval_every": 0}}

# Trials of 48 steps that checkpoint every 6: short for the suite, long enough to be caught mid-run (with
# 24, the 18 steps after the first checkpoint can end before a loaded machine's poll and kill land).
SHORT_CHECKPOINTED = {**LONG_TRIALS, "fixed": {**LONG_TRIALS["fixed"], "epochs": 1, "max_steps": 48, "eval_every": 6}}
# Long enough that the trials still run when the stop reaches the workers (the 18 steps left of a short
# trial take under a second on a quiet machine, and it completed first); struck at their first checkpoint
# (step 6), they stopped by step 40 at the latest on 2 cores. Short enough for the rerun to finish them soon.
LONGER_CHECKPOINTED = {**LONG_TRIALS, "fixed": {**LONG_TRIALS["fixed"], "epochs": 4, "max_steps": 160, "eval_every": 6}}


# Module: xdist's loadgroup hands this module's tests (one group, pytestmark) to one worker together, so the
# cluster starts once and stops after them, instead of idling beside the rest of that worker's tests.
@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    import ray

    # Loopback only: tests reach nothing but this machine.
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 1024**2,
             _node_ip_address="127.0.0.1")
    try:
        address = ray.get_runtime_context().gcs_address
        assert address.startswith("127.0.0.1:"), address  # loopback only (tests/conftest.py)
        yield address
    finally:
        ray.shutdown()


def _ray_args(url: str, data: Path, tmp_path: Path, name: str, address: str, space: dict = SHORT_CHECKPOINTED) -> list[str]:
    """Two Ray workers on trials that checkpoint every 6 steps, a budget of 2."""
    return cli_args(url, _space(tmp_path, space), data, "--study-name", name, "--n-trials", "2",
                    "--artifact-store", str(tmp_path / "artifacts"), "--ray", address, "--workers", "2")


def _strike(
    url: str, name: str, args: list[str], tmp_path: Path, strike: Callable[[subprocess.Popen[str], FrozenTrial], None],
    *, hold: bool = True,
) -> tuple[FrozenTrial, str, str, int]:
    """Start the driver, ``strike`` it once a trial runs with a checkpoint (``hold``: with that trial's Ray worker stopped
    until the strike is done); that trial, its output and exit code."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen([sys.executable, "-m", "hpo.run", *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        held = (_held_with_checkpoint(url, name, lambda t: t.user_attrs["worker"]["pid"]) if hold
                else contextlib.nullcontext(_wait_for(url, name, _running_with_checkpoint)))
        with held as victim:
            strike(driver, victim)
        out, err = driver.communicate(timeout=400)
    finally:
        driver.kill()
    return victim, out, err, driver.returncode


def _counted(trials: list[FrozenTrial]) -> int:
    """Trials counting toward the budget: not the instant skips (an unsupported precision, a start past the budget)."""
    return sum(counts_toward_budget(t) for t in trials)


def _placed(trial: FrozenTrial) -> bool:
    worker = trial.user_attrs.get("worker") or {}
    return all(worker.get(key) for key in ("node", "ray_node", "ray_worker", "ray_actor"))


def test_a_sigkilled_ray_worker_is_restarted_and_its_trial_resumes_with_the_budget_exact(
    ray_address: str, pg_database: str, small_data: Path, tmp_path: Path,
) -> None:
    args = _ray_args(pg_database, small_data, tmp_path, "ray-kill", ray_address)
    # SIGKILL the Ray worker process running the trial.
    victim, out, err, code = _strike(pg_database, "ray-kill", args, tmp_path, lambda d, t: os.kill(t.user_attrs["worker"]["pid"], signal.SIGKILL))
    assert code == 0, err[-3000:]
    trials = _trials(pg_database, "ray-kill")
    assert _counted(trials) == 2  # exactly the budget
    assert not [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    # Found at once by the restarted actor (or the other worker), not after the 120 s heartbeat grace period.
    dead = next(t for t in trials if t.number == victim.number)
    assert dead.state == TrialState.FAIL and dead.user_attrs["fail_reason"].startswith("worker_died")
    retry = next(t for t in trials if t.system_attrs.get("failed_trial") == victim.number)
    _assert_resumed(retry, victim)
    assert retry.user_attrs["worker"]["ray_worker"] != victim.user_attrs["worker"]["ray_worker"]
    # Every trial records where it ran: the node and the Ray worker, two workers in all besides the restarted one.
    trained = [t for t in trials if "worker" in t.user_attrs]
    assert all(_placed(t) for t in trained) and len(trained) >= 3
    assert len({t.user_attrs["worker"]["ray_actor"] for t in trained}) == 2
    assert "Starting 2 Ray workers" in out
    assert "Study 'ray-kill' in postgresql://" in out and "0 of 2 budgeted trials already finished; training on" in out


def test_sigterm_on_the_driver_leaves_the_running_trials_waiting_and_a_rerun_finishes_the_budget(
    ray_address: str, pg_database: str, small_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    args = _ray_args(pg_database, small_data, tmp_path, "ray-int", ray_address, LONGER_CHECKPOINTED)
    # As `docker stop` or a scheduler does: SIGTERM to the driver's whole process group. ray.init's own
    # SIGTERM handler (sys.exit, and Ray's stack dump) replaced the command's: the trials stayed RUNNING.
    # (SIGINT, a terminal's Ctrl-C, takes the same StopSignal path; --workers' tests send it.)
    victim, out, err, code = _strike(pg_database, "ray-int", args, tmp_path, lambda d, t: os.killpg(d.pid, signal.SIGTERM))
    assert code == 143, err[-3000:]
    assert "Traceback" not in out + err and "rerun the same command" in err.strip().splitlines()[-1]
    trials = _trials(pg_database, "ray-int")
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    interrupted = [t for t in trials if t.state == TrialState.FAIL]
    assert interrupted and all(t.user_attrs["fail_reason"] == "interrupted" for t in interrupted)
    for trial in interrupted:
        assert [t.state for t in trials if t.system_attrs.get("failed_trial") == trial.number] == [TrialState.WAITING]

    # The rerun, from any machine that reaches the database: here this test process, without Ray (a Ray
    # rerun's driver and actors cost three more processes; a restarted Ray worker's resume has the test above).
    local = args[: args.index("--ray")]  # --ray ADDRESS --workers 2 come last
    assert "--workers" not in local and run_main(local) == 0
    trials = _trials(pg_database, "ray-int")
    assert _counted(trials) == 2 and not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    # The trial struck after an evaluation: the other one may have stopped before its first (its stop checkpoint
    # then holds no evaluations to carry over), so the learning curve is checked on the struck one.
    struck = next(t for t in interrupted if t.number == victim.number)
    _assert_resumed(next(t for t in trials if t.system_attrs.get("failed_trial") == struck.number), struck)

    # Another rerun on Ray, the budget met: no actor is started (each would import torch and transformers for nothing).
    capsys.readouterr()
    assert run_main(args) == 0
    out = capsys.readouterr().out
    assert "Ray workers" not in out and "2 of 2 budgeted trials already finished" in out and "2 of 2 budgeted trials finished" in out


def test_a_second_signal_kills_the_workers_then_their_trials_are_failed_and_requeued_at_once(
    ray_address: str, pg_database: str, small_data: Path, tmp_path: Path,
) -> None:
    """A second SIGTERM while a worker cannot stop (here: frozen with SIGSTOP; in life, a long checkpoint or a hung
    device): the workers are killed mid-trial. Their trials stayed RUNNING until a heartbeat sweep or a rerun on the
    same machine; the driver now fails and re-queues them once Ray has the workers dead, and a retry resumes from
    the last checkpoint they saved."""
    args = _ray_args(pg_database, small_data, tmp_path, "ray-twice", ray_address, LONGER_CHECKPOINTED)
    frozen: list[int] = []

    def twice(driver: subprocess.Popen[str], trial: FrozenTrial) -> None:
        frozen.append(trial.user_attrs["worker"]["pid"])
        os.kill(frozen[0], signal.SIGSTOP)  # this worker never sees the stop the first signal sends
        os.killpg(driver.pid, signal.SIGTERM)
        time.sleep(1.0)  # the first signal reaches the workers (STOP_POLL_S); the other one stops as it should
        os.killpg(driver.pid, signal.SIGTERM)

    try:
        victim, out, err, code = _strike(pg_database, "ray-twice", args, tmp_path, twice, hold=False)  # it stops the worker for good
    finally:
        for pid in frozen:  # killed by Ray already, unless the driver failed before it could
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert code == 143, err[-3000:]
    assert "Traceback" not in out + err and "rerun the same command" in err.strip().splitlines()[-1]
    trials = _trials(pg_database, "ray-twice")
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    killed = next(t for t in trials if t.number == victim.number)
    assert killed.state == TrialState.FAIL
    assert killed.user_attrs["fail_reason"].startswith("worker_died: its Ray worker was killed by the driver")
    assert killed.user_attrs["checkpoint"]["step"] > 0  # what its retry resumes from
    assert [t.state for t in trials if t.system_attrs.get("failed_trial") == killed.number] == [TrialState.WAITING]


def test_gpus_per_trial_reaches_ray_and_the_report_flags_shared_gpu_speeds_then_the_actors_make_the_verdict(
    ray_address: str, pg_database: str, small_data: Path, tmp_path: Path,
) -> None:
    study = hpo.optimize(
        TINY, small_data, storage=pg_database, study_name="ray-gpus", n_trials=4, device="cpu", text_column="sentence",
        artifact_store=str(tmp_path / "artifacts"), ray=ray_address, workers=2, gpus_per_trial=0.5, verdict=2,
    )
    everything = study.get_trials()
    # The verdict, after the budget, in the same Ray actors: 2 paired seeds x the 3 precisions a CPU runs.
    verdict = [t for t in everything if is_verdict_trial(t)]
    assert sorted((t.user_attrs["verdict_trial"]["precision"], t.user_attrs["verdict_trial"]["seed_index"]) for t in verdict) == [
        (p, i) for p in ("bf16", "fp16", "fp32") for i in (0, 1)]
    assert all(t.state == TrialState.COMPLETE and _placed(t) for t in verdict)
    stored = stored_verdict(study)
    assert stored and [row["precision"] for row in stored["rows"]] == ["fp32", "fp16", "bf16"] and "tf32" in stored["unsupported"]
    trials = [t for t in everything if not is_verdict_trial(t)]
    assert _counted(trials) == 4 and not [t for t in trials if t.state == TrialState.RUNNING]  # the budget, exactly
    workers = [t.user_attrs["worker"] for t in trials if "worker" in t.user_attrs]
    # Read inside each Ray actor from its assigned resources: half a GPU each, so two trials share one.
    assert {w["gpu_fraction"] for w in workers} == {0.5} and {w["trials_per_gpu"] for w in workers} == {2}
    assert all(_placed(t) for t in trials if "worker" in t.user_attrs) and len({w["ray_worker"] for w in workers}) == 2
    report = build_report(study, pg_database)
    assert report.shared_gpu == sorted(t.number for t in everything if "worker" in t.user_attrs)  # the verdict's too
    assert all(row.speedup is None and row.median_samples_per_s is None for row in report.rows)


def test_a_worker_that_cannot_reach_the_storage_fails_in_the_driver_with_one_line(ray_address: str, pg_server: str) -> None:
    # The worker's database is refused by the server the driver reached (it does not exist): a wrong URL
    # fails at once; a server that is down is waited for up to the storage's bound first (tests/e2e/test_connection_kills.py).
    unreachable = "postgresql://postgres:secret@127.0.0.1:5432/hpo_no_such_database"
    job = WorkerJob(resolve_space(TINY), resolve_data(None), RunOptions(storage=unreachable, study_name="s", n_trials=1))
    cluster = connect(ray_address, pg_server)
    actors = start_workers(cluster, plan(cluster, 1, 0.0))
    with pytest.raises(StorageError) as raised:
        wait_for_workers(cluster, actors, functools.partial(run_job, job), stop_requested=lambda: False)
    assert "hpo_no_such_database" in str(raised.value) and len(str(raised.value).splitlines()) == 1
    assert "secret" not in str(raised.value)


def test_sqlite_on_a_multi_node_cluster_is_one_line(small_data: Path, small_space: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    database = tmp_path / "studies.db"
    args = cli_args(f"sqlite:///{database}", small_space, small_data, "--ray", "ray://127.0.0.1:10001")
    assert run_main(args) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "PostgreSQL" in err and "gRPC proxy" in err and not database.exists()
    with pytest.raises(hpo.UserError, match="on 2 nodes; use PostgreSQL"):
        refuse_shared_sqlite(f"sqlite:///{database}", "auto", nodes=2)
    refuse_shared_sqlite(f"sqlite:///{database}", "auto", nodes=1)  # one node: one machine's file is fine


def test_without_the_ray_extra_ray_is_one_line(small_data: Path, small_space: Path, tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "ray"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    args = cli_args(f"sqlite:///{tmp_path / 'studies.db'}", small_space, small_data, "--ray")
    result = run_cli(args, tmp_path, env={"PYTHONPATH": f"{shim.parent}{os.pathsep}{ROOT}"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "python -m hpo.run: error: --ray needs Ray, which is not installed: pip install 'precision-hpo[ray]'"
    ]
