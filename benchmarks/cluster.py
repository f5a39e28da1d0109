"""A study's wall time and trials per hour for one budget with 1, 2 (and 4) workers: ``--ray`` against ``--workers``.

Each measurement runs ``python -m hpo run`` on a fresh SQLite study with the same space, data
and budget, its workers either our own processes (``--workers N``) or Ray actors on a Ray
cluster the command starts on this machine (``--ray --workers N``: Ray's start-up is part of
its wall time, as it is for a user). The launchers alternate within each repetition. On a GPU
machine, ``--gpu-sharing`` runs ``--workers N --gpus 0`` instead: N trials on one GPU, each
trial's samples/s alone (N=1) against shared. Run from the repository root::

    python -m benchmarks.cluster [--workers 1 2] [--n-trials 6] [--max-steps N] [--reps 1] [--json out.json]
    python -m benchmarks.cluster --gpu-sharing --workers 1 2 4 --device cuda -- --space S.yaml --data train.tsv ...
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
from hpo.study import counts_toward_budget

SPACE = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {"learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True}},
    "fixed": {"model": "tiny-bert", "fp_precision": "fp32", "batch_size": 16, "epochs": 1, "max_length": 48, "eval_every": 0},
}


def run_once(launcher: str, workers: int, n_trials: int, device: str, extra: list[str], max_steps: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hpo-bench-cluster-") as scratch:
        space = Path(scratch) / "space.yaml"
        steps = {} if max_steps is None else {"max_steps": max_steps}
        space.write_text(yaml.safe_dump({**SPACE, "fixed": {**SPACE["fixed"], **steps}}))
        url = f"sqlite:///{Path(scratch) / 'studies.db'}"
        placement = {"workers": [], "ray": ["--ray"], "gpu-sharing": ["--gpus", "0"]}[launcher]
        command = [
            sys.executable, "-m", "hpo", "run", "--space", str(space), "--storage", url, "--device", device, "--quiet",
            "--n-trials", str(n_trials), "--workers", str(workers), *placement, "--cache-dir", str(Path(scratch) / "cache"),
            "--artifact-store", str(Path(scratch) / "artifacts"), *extra,
        ]
        tick = time.perf_counter()
        proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        wall = time.perf_counter() - tick
        if proc.returncode != 0:
            raise RuntimeError(f"{launcher} x{workers}: exit {proc.returncode}: {proc.stderr[-2000:]}")
        trials = optuna.load_study(study_name="precision-demo", storage=url).trials
    finished = [t for t in trials if counts_toward_budget(t)]  # not instant skips (e.g. a start past the budget)
    speeds = [t.user_attrs["throughput_samples_per_s"] for t in finished if "throughput_samples_per_s" in t.user_attrs]
    return {
        "wall_seconds": wall, "finished": len(finished), "trials_per_hour": len(finished) / wall * 3600,
        "median_samples_per_s": statistics.median(speeds) if speeds else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to compare (default 1 2)")
    parser.add_argument("--n-trials", type=int, default=6, help="the study's budget (default 6)")
    parser.add_argument("--reps", type=int, default=1, help="repetitions of each setting (default 1)")
    parser.add_argument("--max-steps", type=int, default=None, help="cap each trial's optimizer steps (default: one epoch)")
    parser.add_argument("--device", default="cpu", help="--device of the runs (default cpu)")
    parser.add_argument("--gpu-sharing", action="store_true", help="N workers on GPU 0 (--workers N --gpus 0) instead of --ray vs --workers")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("extra", nargs="*", help="after --: more hpo.run flags (--space, --data, --fix ...)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    launchers = ("gpu-sharing",) if args.gpu_sharing else ("workers", "ray")
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        for workers in args.workers:
            for launcher in launchers if rep % 2 == 0 else launchers[::-1]:
                result = run_once(launcher, workers, args.n_trials, args.device, args.extra, args.max_steps)
                runs.append({"launcher": launcher, "workers": workers, "rep": rep, **result})
                speed = result["median_samples_per_s"]
                print(f"rep {rep + 1} {launcher:<11} x{workers}: {result['wall_seconds']:7.1f} s, {result['finished']} trials, "
                      f"{result['trials_per_hour']:6.0f} trials/hour, {speed or 0:6.0f} samples/s median", flush=True)
    print("\n| launcher | workers | wall time to the budget (median) | trials/hour | training samples/s per trial (median) |")
    print("|---|---:|---:|---:|---:|")
    for launcher in launchers:
        for workers in args.workers:
            mine = [r for r in runs if r["launcher"] == launcher and r["workers"] == workers]
            wall = statistics.median(r["wall_seconds"] for r in mine)
            speed = statistics.median(r["median_samples_per_s"] or 0 for r in mine)
            print(f"| {launcher} | {workers} | {wall:.1f} s | {statistics.median(r['trials_per_hour'] for r in mine):.0f} | {speed:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"environment": environment(), "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
