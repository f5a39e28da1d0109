"""``python -m hpo.check`` on the CPU: hardware report, precision support and a real speed test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, assert_one_line_flag_error

from hpo.cli._check import main
from trial_executor.precision import emulated_precisions


def test_check_on_cpu_times_every_supported_precision(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hpo.check", "--device", "cpu", "--model", "tiny-bert", "--steps", "2", "--warmup", "1",
         "--seq-len", "16", "--batch-size", "4"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "device_type: cpu" in out and "torch_version: " in out and "bf16_supported: " in out
    # torch's threads and the machine's CPUs, each once under its own name (the run shares out the cores).
    assert out.count("cpu_threads: ") == 1 and f"  logical_cpus: {os.cpu_count()}\n" in out
    assert "  fp32: supported" in out and "  tf32: unsupported: TF32" in out
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in out.splitlines() if line.startswith("| ")}
    assert rows["fp32"][2] == "1.00x"
    assert rows["tf32"][:5] == ["-"] * 5 and rows["tf32"][5].startswith("unsupported: TF32")
    emulated = emulated_precisions(torch.device("cpu"))  # this machine's CPU: an AMD EPYC emulates fp16
    for precision in ("fp32", "fp16", "bf16"):
        ms_per_step, samples_per_s, _, peak_mb, loss, note = rows[precision]
        assert float(ms_per_step) > 0 and float(samples_per_s) > 0 and float(peak_mb) > 0
        said = f"emulated: this CPU has no {precision} matmul instructions" if precision in emulated else ""
        assert 0 < float(loss) < 10 and note == said, (precision, note)


def test_check_times_only_the_precisions_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    # A GPU session has minutes: a compiled check times only what it needs, in registry order.
    flags = ["--device", "cpu", "--model", "tiny-bert", "--steps", "1", "--warmup", "0", "--seq-len", "16", "--batch-size", "2"]
    assert main([*flags, "--precision", "bf16", "--precision", "fp32"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r[0].strip() for r in rows[1:]] == ["fp32", "bf16"] and float(rows[2][3].strip().rstrip("x")) > 0
    # No fp32: no reference, so no speedup rather than a made-up one. A knob the device cannot run says so on its row.
    assert main([*flags, "--precision", "bf16", "--capture-step", "on"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [r[0].strip() for r in rows[1:]] == ["bf16"] and rows[1][3].strip() == "-"
    emulated = ["emulated: this CPU has no bf16 matmul instructions"] if "bf16" in emulated_precisions(torch.device("cpu")) else []
    assert rows[1][-1].strip() == "; ".join([*emulated, "capture_step: CUDA graphs are CUDA only, not cpu; the step runs eager"])


def test_a_batch_the_host_cannot_hold_is_out_of_memory_on_its_row(capsys: pytest.CaptureFixture[str]) -> None:
    # The CPU allocator's failure is a RuntimeError, not a MemoryError: it was a traceback, not the row a GPU's OOM gets.
    flags = ["--device", "cpu", "--model", "tiny-bert", "--steps", "1", "--warmup", "0", "--seq-len", "16", "--precision", "fp32"]
    assert main([*flags, "--batch-size", str(10**12)]) == 0
    assert f"| fp32 | - | - | - | - | - | out of memory at batch size {10**12} |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--precision", "fp8"], "--precision: invalid choice: 'fp8'"),
        (["--model", "bert-base"], "unknown model 'bert-base'; did you mean 'bert-base-random'?"),
        (["--steps", "0"], "--steps: must be at least 1"),
    ],
)
def test_bad_flags_are_one_line(flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_flag_error(main, flags, expected, capsys)


def test_too_long_sequence_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "tiny-bert", "--seq-len", "4096", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--seq-len 4096 is longer than tiny-bert's 512 positions; pass --seq-len 512 or less" in err and len(err.strip().splitlines()) == 1


def test_both_whole_step_knobs_on_is_one_line_before_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    # It printed the hardware section, then a traceback from the first speed test.
    assert main(["--model", "tiny-bert", "--device", "cpu", "--steps", "1", "--compile-step", "on", "--capture-step", "on",
                 "--master-weights", "off"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == ("python -m hpo.check: error: --compile-step on --capture-step on: "
                                         "compile_step and capture_step are two ways to run the same whole step: turn one off")


def test_a_precision_timed_while_another_process_held_the_core_says_so() -> None:
    from _cpu_contention import sharing_one_core

    from hpo.cli._speed_test import speed_test

    # Enough steps for over a second of ready time (judged), few enough for a test.
    flags = {"batch_size": 16, "seq_len": 64, "steps": 100, "warmup": 1, "precisions": ["fp32"]}
    with sharing_one_core():
        (shared,) = speed_test("tiny-bert", torch.device("cpu"), **flags)
    assert shared.samples_per_s and "CPU-contended (waited " in shared.note and "other processes held them" in shared.note
