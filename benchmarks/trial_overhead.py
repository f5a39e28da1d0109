"""Seconds per trial of a study of small trials: this checkout against ``--anchor`` (a git revision), side by side.

What a study spends around its trials' steps (garbage collection between trials, storage writes,
building each trial) shows in small trials: ``--trials`` (10) tiny-bert trials of ``--steps`` (20)
optimizer steps at batch 16 on 800 synthetic reviews, through ``hpo.optimize`` on a fresh SQLite
file, on the CPU. Each side runs in a fresh process, anchor and ours alternating ``--repeats`` (3)
times; the anchor's code is its ``git archive``, so nothing of this checkout leaks into it. In each
process a one-trial study first pays the imports and the caches; the clock then covers the timed
study. Reported: each side's median seconds per trial and anchor / ours (above 1: ours is faster).

Run from the repository root on a quiet machine (about 2 minutes on 2 cores)::

    python -m benchmarks.trial_overhead [--anchor HEAD~1] [--trials 10] [--steps 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from trial_executor import make_synthetic_reviews

ROOT = Path(__file__).resolve().parent.parent
SIDE = """
import json, sys, time
import hpo
data, out, trials, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
space = {
    "objective": {"metric": "accuracy", "direction": "maximize"}, "pruner": {"type": "none"},
    "params": {"learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True}},
    "fixed": {"model": "tiny-bert", "batch_size": 16, "max_length": 48, "max_steps": steps, "eval_every": 10},
}
hpo.optimize(space, data, n_trials=1, storage=f"sqlite:///{out}/warm.db", study_name="warm", device="cpu")
start = time.perf_counter()
hpo.optimize(space, data, n_trials=trials, storage=f"sqlite:///{out}/timed.db", study_name="timed", device="cpu")
print(json.dumps({"seconds_per_trial": (time.perf_counter() - start) / trials}))
"""


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _export(revision: str, directory: Path) -> Path:
    """The anchor's tree (``git archive``) in ``directory``."""
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    return directory


def _write_reviews(path: Path) -> Path:
    texts, labels = make_synthetic_reviews(810, seed=7)
    unique = list(dict(zip(texts, labels, strict=True)).items())[:800]  # no text twice (a repeat is warned about)
    with path.open("w", newline="") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["text", "label"])
        writer.writerows((text, ["negative", "positive"][label]) for text, label in unique)
    return path


def _side(source: Path, data: Path, scratch: Path, trials: int, steps: int) -> float:
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(source), "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run([sys.executable, "-c", SIDE, str(data), str(scratch), str(trials), str(steps)], cwd=scratch, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"trial_overhead: the side in {source} failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds_per_trial"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--anchor", default="HEAD~1", help="the git revision to compare with (default: %(default)s)")
    parser.add_argument("--trials", type=int, default=10, help="trials of the timed study (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per trial (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="processes per side, alternating (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trial-overhead-") as tmp:
        directory = Path(tmp)
        anchor = _export(args.anchor, directory / "anchor")
        data = _write_reviews(directory / "reviews.tsv")
        times: dict[str, list[float]] = {"anchor": [], "ours": []}
        for repeat in range(args.repeats):
            for name, source in (("anchor", anchor), ("ours", ROOT)):
                times[name].append(_side(source, data, directory / f"{name}-{repeat}", args.trials, args.steps))
    ours, anchored = statistics.median(times["ours"]), statistics.median(times["anchor"])
    print(f"{args.trials} tiny-bert trials of {args.steps} steps, batch 16, CPU ({_cpu()}, {os.cpu_count()} CPUs); "
          f"ours against {args.anchor}, median of {args.repeats} processes per side")
    print("| side | seconds per trial | each process |")
    print("|---|---|---|")
    for name, median in (("anchor", anchored), ("ours", ours)):
        print(f"| {name} | {median:.3f} | {', '.join(f'{t:.3f}' for t in times[name])} |")
    print(f"anchor / ours: {anchored / ours:.2f}x")


if __name__ == "__main__":
    main()
