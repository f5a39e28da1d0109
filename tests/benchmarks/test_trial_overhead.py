"""benchmarks/trial_overhead.py at its smallest: a study's seconds per trial, ours and the anchor revision's, side by side."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def test_seconds_per_trial_are_timed_for_ours_and_the_anchor_in_fresh_processes() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.trial_overhead", "--anchor", "HEAD", "--trials", "1", "--steps", "1", "--repeats", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in proc.stdout.splitlines() if line.startswith("| ")}
    assert float(rows["anchor"]) > 0 and float(rows["ours"]) > 0
    assert re.search(r"^anchor / ours: \d+\.\d\dx$", proc.stdout, re.MULTILINE), proc.stdout
