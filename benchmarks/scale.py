"""One PostgreSQL study of 5,000 finished trials: how long each reading command and a worker's next trial take.

    python -m benchmarks.scale [--trials 5000] [--pg-admin postgresql://postgres@127.0.0.1:5432/postgres]

The study is made quickly through the project's storage: one real trial (the tiny model, two
optimizer steps) gives every user attr a trial of ours records; the other trials copy them with
their own params, values, throughput and peak memory (90% COMPLETE, 10% PRUNED), added in bulk
through ``create_storage``. Then, each in a fresh process as a user runs it: ``status``,
``report``, ``export`` (CSV), ``best``; the dashboard's study page (``python -m hpo dashboard``,
its first API answer for the study: every trial, as the page loads it); and a worker's time
from asking for a trial to having its params (the objective's first steps, the sampler among
them), first and later. Last, reading every trial in-process, Optuna's own ORM reader
(``RDBStorage._get_trials``, the anchor) against the bulk reader ``create_storage`` puts in its
place (``hpo/storage/_bulk_reads.py``), alternating on the same database. The throwaway database is
dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

import hpo
from benchmarks._postgres import throwaway_database
from hpo.storage._bulk_reads import read_trials
from hpo.storage._storage import Heartbeat, create_storage
from trial_executor import demo_dataset

ROOT = Path(__file__).resolve().parent.parent
STUDY = "scale"
INSERTERS = 8
SPACE = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {
        "fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
        "learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True},
        "batch_size": {"type": "categorical", "choices": [8, 16, 32]},
        "warmup_ratio": {"type": "float", "low": 0.0, "high": 0.2},
    },
    "fixed": {"model": "tiny-bert", "max_steps": 2, "eval_every": 2, "max_length": 32},
}


def _copy(template: FrozenTrial, rng: random.Random) -> FrozenTrial:
    params = {}
    for name, dist in template.distributions.items():
        if isinstance(dist, optuna.distributions.CategoricalDistribution):
            params[name] = rng.choice(dist.choices)
        else:
            params[name] = rng.uniform(dist.low, dist.high)
    attrs = {**template.user_attrs, "throughput_samples_per_s": rng.uniform(200, 2000), "peak_memory_mb": rng.uniform(300, 900)}
    attrs["config"] = {**attrs.get("config", {}), **params}
    pruned = rng.random() < 0.1
    return optuna.trial.create_trial(
        state=TrialState.PRUNED if pruned else TrialState.COMPLETE, value=None if pruned else rng.uniform(0.5, 0.95),
        params=params, distributions=template.distributions, user_attrs=attrs,
        intermediate_values={2: rng.uniform(0.5, 0.95)},
    )


def make_study(url: str, trials: int, workdir: Path) -> float:
    """The study with ``trials`` finished trials; returns the seconds the bulk insert took."""
    hpo.optimize(
        SPACE, demo_dataset(n_train=64, n_valid=32, seed=1), storage=url, study_name=STUDY, n_trials=1, device="cpu",
        artifact_store=None, cache_dir=str(workdir / "cache"),
    )
    study = optuna.load_study(study_name=STUDY, storage=create_storage(url))
    template = study.get_trials(states=(TrialState.COMPLETE,))[0]
    rng = random.Random(0)
    copies = [_copy(template, rng) for _ in range(trials - len(study.trials))]
    started = time.perf_counter()
    # Optuna writes a trial's rows one round trip each: processes side by side keep the server busy.
    chunks = [copies[i::INSERTERS] for i in range(INSERTERS)]
    with multiprocessing.get_context("spawn").Pool(INSERTERS) as pool:
        pool.starmap(_add_trials, [(url, chunk) for chunk in chunks])
    return time.perf_counter() - started


def _add_trials(url: str, trials: list[FrozenTrial]) -> None:
    optuna.load_study(study_name=STUDY, storage=create_storage(url)).add_trials(trials)


def time_command(args: list[str], workdir: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hpo", *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {proc.stderr[-2000:]}")
    return seconds


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def time_dashboard(url: str, workdir: Path) -> dict[str, float]:
    """Seconds to the dashboard's first answer, then for the study list and the study page's trial data."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "hpo", "dashboard", "--storage", url, "--port", str(port)],
                              cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/studies", timeout=120) as response:
                    studies = json.load(response)["study_summaries"]
                break
            except OSError:
                if server.poll() is not None or time.perf_counter() - started > 300:
                    raise RuntimeError("the dashboard did not start") from None
                time.sleep(0.2)
        up = time.perf_counter() - started
        study_id = next(s["study_id"] for s in studies if s["study_name"] == STUDY)
        timings = {"dashboard: start to first answer": up}
        for label, path in (("dashboard: study list (/api/studies)", "/api/studies"),
                            ("dashboard: study page data (/api/studies/ID?after=0)", f"/api/studies/{study_id}?after=0"),
                            ("dashboard: study page data, again", f"/api/studies/{study_id}?after=0")):
            began = time.perf_counter()
            with urllib.request.urlopen(base + path, timeout=600) as response:
                body = response.read()
            timings[label] = time.perf_counter() - began
            if "after=0" in path:
                timings[f"{label}: trials answered"] = len(json.loads(body)["trials"])
        return timings
    finally:
        server.terminate()
        server.wait(timeout=30)


def time_worker_start(url: str, repeats: int = 5) -> list[float]:
    """Seconds from a worker asking for a trial to the trial having its params, as the objective gets them."""
    space = hpo.parse_search_space(SPACE)
    study = optuna.load_study(study_name=STUDY, storage=create_storage(url, heartbeat=Heartbeat()),
                              sampler=space.build_sampler(0))
    seconds: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        trial.storage.get_trial(trial._trial_id)  # as Objective._configure reads the stored trial
        space.suggest(trial)
        seconds.append(time.perf_counter() - asked)
        raise optuna.TrialPruned  # nothing trained: the trial ends at once, not counted as COMPLETE

    for _ in range(repeats):
        asked = time.perf_counter()
        study.optimize(objective, n_trials=1)
    return seconds


def time_readers(url: str, repeats: int = 3) -> tuple[list[float], list[float]]:
    """Seconds to read every trial: Optuna's ORM reader (the anchor) and ours, alternating, same database."""
    storage = optuna.storages.RDBStorage(url)
    study_id = storage.get_study_id_from_name(STUDY)
    orm, bulk = [], []
    try:
        for _ in range(repeats):
            for seconds, read in ((orm, lambda: storage._get_trials(study_id, None, set(), -1)),
                                  (bulk, lambda: read_trials(storage.engine, study_id))):
                started = time.perf_counter()
                read()
                seconds.append(time.perf_counter() - started)
    finally:
        storage.engine.dispose()
    return orm, bulk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5000)
    parser.add_argument("--pg-admin", default=os.environ.get("HPO_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with throwaway_database(args.pg_admin, "hpo_scale") as url, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        insert = make_study(url, args.trials, workdir)
        print(f"made {args.trials} finished trials in {insert:.1f} s", flush=True)
        results: dict[str, float] = {}
        for command in (["status", "--study-name", STUDY], ["report", "--study-name", STUDY, "--out", str(workdir / "report")],
                        ["export", "--study-name", STUDY, "--format", "csv", "--out", str(workdir / "trials.csv")],
                        ["best", "--study-name", STUDY]):
            results[command[0]] = time_command([command[0], "--storage", url, *command[1:]], workdir)
            print(f"{command[0]}: {results[command[0]]:.2f} s", flush=True)
        for label, seconds in time_dashboard(url, workdir).items():
            print(f"{label}: {seconds:.2f}" + ("" if label.endswith("answered") else " s"), flush=True)
        orm, bulk = time_readers(url)
        print(f"reading every trial in-process: Optuna's ORM reader median {statistics.median(orm):.2f} s, "
              f"the bulk reader {statistics.median(bulk):.2f} s ({statistics.median(orm) / statistics.median(bulk):.1f}x), "
              f"3 alternating repeats", flush=True)
        starts = time_worker_start(url)
        print(f"worker ask-to-params: first {starts[0]:.3f} s, then median {statistics.median(starts[1:]):.3f} s "
              f"(max {max(starts[1:]):.3f} s) of {len(starts) - 1}", flush=True)


if __name__ == "__main__":
    main()
