"""benchmarks/contention.py on the CPU: a trial beside busy processes records that it waited for its cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def _on_one_core() -> None:
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def test_a_trial_beside_spinning_processes_is_recorded_as_cpu_contended(tmp_path: Path) -> None:
    # On one core, one thread (the benchmark spins a process per core it has): the trial waits about half its ready
    # time whatever else runs. On every core, a test process's one OpenMP thread beside a spinner per core waited
    # 17% under a busy suite, as the scheduler favours the thread that sleeps.
    out = tmp_path / "contention.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.contention", "--steps", "300", "--rows", "480", "--reps", "1", "--cells", "spin-passive",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=_on_one_core, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert list(rows) == ["cell", "spin-passive"] and rows["spin-passive"][1] == "-"  # no alone-default cell to compare with
    summary = json.loads(out.read_text())["summary"]
    # A busy process on every core: the trial's threads wait about half their ready time, and the trial says so.
    assert summary["spin-passive"]["cpu_wait_fraction"] > 0.3 and summary["spin-passive"]["cpu_contended"] == ["True"]
    assert summary["spin-passive"]["samples_per_s"] > 0


def test_an_unknown_cell_is_refused_before_anything_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.contention", "--cells", "alone-spinning"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown cell 'alone-spinning'; choose from alone-default" in proc.stderr
