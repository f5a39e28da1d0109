"""``--workers N`` on one CPU machine: the cores shared out among workers vs a thread per core each.

``run_workers`` gives each worker ``OMP_NUM_THREADS = cores // N``. The anchor is what a
worker did before (and what plain ``optuna`` scripts started N times do): torch's default of
one intra-op thread per core in every worker, forced here with ``OMP_NUM_THREADS = cores``.

Each measurement runs ``python -m hpo run --workers N`` on a fresh SQLite study (the demo
data and the tiny-bert/tiny-distilbert space below, fp32, ``--n-trials`` trials) and reports
the wall time to the budget and the median training samples/s of its trials. The two
settings alternate within each repetition. Run from the repository root::

    python -m benchmarks.workers [--workers 2] [--n-trials 6] [--reps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import yaml

from benchmarks._runs import REPO_ROOT, environment

SPACE = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {
        "batch_size": {"type": "categorical", "choices": [16, 32]},
        "learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True},
        "model": {"type": "categorical", "choices": ["tiny-bert", "tiny-distilbert"]},
    },
    "fixed": {"fp_precision": "fp32", "epochs": 1, "max_length": 48, "eval_every": 50},
}
SETTINGS = ("shared-cores", "thread-per-core")


def run_once(setting: str, workers: int, n_trials: int) -> dict[str, Any]:
    cores = len(os.sched_getaffinity(0))
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    if setting == "thread-per-core":
        env["OMP_NUM_THREADS"] = str(cores)
    env["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="hpo-bench-workers-") as scratch:
        space = Path(scratch) / "space.yaml"
        space.write_text(yaml.safe_dump(SPACE))
        url = f"sqlite:///{Path(scratch) / 'studies.db'}"
        command = [
            sys.executable, "-m", "hpo", "run", "--space", str(space), "--storage", url, "--device", "cpu", "--quiet",
            "--n-trials", str(n_trials), "--workers", str(workers), "--cache-dir", str(Path(scratch) / "cache"),
            "--artifact-store", str(Path(scratch) / "artifacts"),
        ]
        tick = time.perf_counter()
        proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - tick
        if proc.returncode != 0:
            raise RuntimeError(f"{setting}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        trials = optuna.load_study(study_name="precision-demo", storage=url).trials
    speeds = [t.user_attrs["throughput_samples_per_s"] for t in trials if "throughput_samples_per_s" in t.user_attrs]
    threads = sorted({t.user_attrs["hardware"]["cpu_threads"] for t in trials if "hardware" in t.user_attrs})
    return {"wall_seconds": wall, "median_samples_per_s": statistics.median(speeds), "trials": len(speeds), "cpu_threads": threads}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--n-trials", type=int, default=6, help="the study's budget (default 6)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each setting (default 3)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cores = len(os.sched_getaffinity(0))
    print(f"{args.workers} workers on {cores} cores, {args.n_trials} trials per study, {args.reps} reps", flush=True)
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        order = SETTINGS if rep % 2 == 0 else SETTINGS[::-1]
        for setting in order:
            result = run_once(setting, args.workers, args.n_trials)
            runs.append({"setting": setting, "rep": rep, **result})
            print(f"rep {rep + 1} {setting:<16} {result['wall_seconds']:7.1f} s to the budget  "
                  f"{result['median_samples_per_s']:7.0f} samples/s median  cpu_threads {result['cpu_threads']}", flush=True)
    summary = {}
    for setting in SETTINGS:
        mine = [r for r in runs if r["setting"] == setting]
        summary[setting] = {
            "wall_seconds_median": statistics.median(r["wall_seconds"] for r in mine),
            "samples_per_s_median": statistics.median(r["median_samples_per_s"] for r in mine),
        }
    ratio = summary["thread-per-core"]["wall_seconds_median"] / summary["shared-cores"]["wall_seconds_median"]
    print()
    print("| setting | wall time to the budget (median) | training samples/s (median) |")
    print("|---|---:|---:|")
    for setting in SETTINGS:
        print(f"| {setting} | {summary[setting]['wall_seconds_median']:.1f} s | {summary[setting]['samples_per_s_median']:.0f} |")
    print(f"\nshared-cores finishes the study {ratio:.2f}x faster than thread-per-core")
    if args.json:
        args.json.write_text(json.dumps({"environment": environment(), "runs": runs, "summary": summary, "speedup": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
