"""benchmarks/update_host.py on the CPU: each variant in its own process, the same updates from the same start."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_update_variants_run_apart_and_a_rerun_lands_on_the_same_parameters() -> None:
    # The GPU session that runs this has minutes: the table must come out, CUDA-only rows said as such.
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.update_host", "--device", "cpu", "--model", "tiny-bert", "--steps", "3",
         "--warmup", "1", "--variants", "eager-fused,captured"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in proc.stdout.splitlines()[2:]}
    parameters, first_s, host_ms, ms, updates, checksum, note = rows["eager-fused"]
    assert parameters == "41" and updates == "28" and float(host_ms) > 0 and float(ms) > 0 and note == "" and float(first_s) >= 0, \
        proc.stdout  # a failed child's row names how it ended
    assert rows["captured"][-1] == "CUDA only"
    # A second run from the same seed lands on the same parameters: the checksum is what variants are compared by.
    again = subprocess.run(proc.args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert f"| {checksum} |" in again.stdout
