"""A CPU trial beside other processes: what sharing its cores costs, what the trial records, and OpenMP's wait policy.

One trial (``run_trial``, tiny-bert, fp32, torch's default threads: one per core) runs in a fresh
process, alone or with a rival started beside it on the same cores:

- ``alone``: nothing else (the anchor);
- ``trial``: the same trial in a second process, started together (two ``hpo.run`` started by hand);
- ``spin``: one busy non-torch process per core (a build, another service).

each under OpenMP's default wait policy (idle threads spin) and with ``OMP_WAIT_POLICY=PASSIVE``
(they sleep), given to every torch process of the cell. Each row gives the measured trial's training
samples/s, its ratio to ``alone`` under the default policy in the same run, the trial's own
``cpu_wait_fraction`` and ``cpu_contended`` (what the report and ``status`` read), and for ``trial``
the combined samples/s of both. Cells alternate within each repetition. Run from the repository root::

    python -m benchmarks.contention [--steps 240] [--rows 4000] [--reps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._runs import REPO_ROOT, environment

RIVALS = ("alone", "trial", "spin")
POLICIES = ("default", "passive")
CELLS = tuple(f"{rival}-{policy}" for rival in RIVALS for policy in POLICIES)


def one_trial(steps: int, rows: int, out: Path) -> None:
    """The measured trial, in this process: its result's speed and CPU wait to ``out``."""
    from trial_executor import TrainConfig, demo_dataset, run_trial

    data = demo_dataset(n_train=rows, n_valid=64, seed=0)
    result = run_trial(TrainConfig(model="tiny-bert", batch_size=16, epochs=10, max_steps=steps, eval_every=0, device="cpu"), data)
    out.write_text(json.dumps({"samples_per_s": result.throughput_samples_per_s, "cpu_wait_fraction": result.cpu_wait_fraction,
                               "cpu_contended": result.cpu_contended}))


def run_cell(cell: str, steps: int, rows: int) -> dict[str, Any]:
    """One cell: the trial (and its rival) in fresh processes; the trial's figures, and the rival trial's speed."""
    rival, policy = cell.rsplit("-", 1)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    if policy == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    trial = [sys.executable, "-m", "benchmarks.contention", "--one", "--steps", str(steps), "--rows", str(rows), "--out"]
    with tempfile.TemporaryDirectory(prefix="hpo-bench-contention-") as scratch:
        outs = [Path(scratch) / "measured.json", Path(scratch) / "rival.json"]
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(len(os.sched_getaffinity(0)))] \
            if rival == "spin" else []
        try:
            procs = [subprocess.Popen([*trial, str(outs[0])], cwd=REPO_ROOT, env=env)]
            if rival == "trial":
                procs.append(subprocess.Popen([*trial, str(outs[1])], cwd=REPO_ROOT, env=env))
            codes = [p.wait(timeout=1800) for p in procs]
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
        if any(codes):
            raise RuntimeError(f"{cell}: a trial process exited {codes}")
        measured = json.loads(outs[0].read_text())
        if rival == "trial":
            measured["rival_samples_per_s"] = json.loads(outs[1].read_text())["samples_per_s"]
    return measured


def _summary(runs: list[dict[str, Any]], cells: list[str]) -> dict[str, dict[str, Any]]:
    summary = {}
    for cell in cells:
        mine = [r for r in runs if r["cell"] == cell]
        summary[cell] = {
            "samples_per_s": statistics.median(r["samples_per_s"] for r in mine),
            "cpu_wait_fraction": statistics.median(r["cpu_wait_fraction"] or 0.0 for r in mine),
            "cpu_contended": sorted({str(r["cpu_contended"]) for r in mine}),
            "combined_samples_per_s": statistics.median(r["samples_per_s"] + r["rival_samples_per_s"] for r in mine)
            if "rival_samples_per_s" in mine[0] else None,
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.contention", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=240, help="optimizer steps of each trial (default 240)")
    parser.add_argument("--rows", type=int, default=4000, help="the demo data's training rows (default 4000; epochs of them)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each cell (default 3)")
    parser.add_argument("--cells", default=",".join(CELLS), help=f"comma-separated, from {', '.join(CELLS)}")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: the measured trial
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one_trial(args.steps, args.rows, args.out)
        return 0
    cells = args.cells.split(",")
    unknown = [c for c in cells if c not in CELLS]
    if unknown or min(args.steps, args.reps, args.rows) < 1:
        parser.error(f"unknown cell {unknown[0]!r}; choose from {', '.join(CELLS)}" if unknown else "--steps, --rows and --reps must be at least 1")
    print(f"{len(os.sched_getaffinity(0))} cores, {args.steps} steps per trial, {args.reps} reps", flush=True)
    runs = []
    for rep in range(args.reps):
        for cell in cells if rep % 2 == 0 else cells[::-1]:
            runs.append({"cell": cell, "rep": rep, **run_cell(cell, args.steps, args.rows)})
    summary = _summary(runs, cells)
    anchor = summary.get("alone-default", {}).get("samples_per_s")
    print("| cell | samples/s (median) | vs alone-default | cpu_wait_fraction | cpu_contended | both trials' samples/s |")
    print("|---|---:|---:|---:|---|---:|")
    for cell, s in summary.items():
        ratio = f"{s['samples_per_s'] / anchor:.2f}x" if anchor else "-"
        both = f"{s['combined_samples_per_s']:.0f}" if s["combined_samples_per_s"] is not None else "-"
        print(f"| {cell} | {s['samples_per_s']:.0f} | {ratio} | {s['cpu_wait_fraction']:.2f} | {', '.join(s['cpu_contended'])} | {both} |")
    if args.json:
        args.json.write_text(json.dumps({"environment": environment(), "runs": runs, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
