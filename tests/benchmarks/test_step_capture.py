"""benchmarks/step_capture.py on the CPU: the executor's eager step timed in a fresh process; the CUDA-only row said as such."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_step_capture_dry_run_times_the_eager_step_and_names_the_cuda_only_variant() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.step_capture", "--device", "cpu", "--model", "tiny-bert", "--batch-size", "4",
         "--seq-len", "16", "--steps", "2", "--warmup", "1", "--no-dropout", "--precisions", "fp32", "--variants", "eager,captured"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in proc.stdout.splitlines()[3:]}
    precision, first_s, ms, host_ms, loss, steps, peak_mb, note = rows["eager"]
    assert precision == "fp32" and float(first_s) >= 0 and float(ms) > 0 and float(host_ms) > 0 and note == ""
    assert peak_mb == "-"  # CUDA's allocator only
    assert 0 < float(loss) < 1 and steps == "11"  # 3 + 2 first, 1 warm-up, 3 host-timed, 2 timed
    assert rows["captured"][-1] == "CUDA only"
