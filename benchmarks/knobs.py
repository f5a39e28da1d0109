"""Issue 7's training knobs, measured: LoRA, gradient checkpointing, auto max_length, DataLoader workers.

Model ``minilm-l6``, ``--rows`` (2,000) SST-2 training rows sampled with a fixed seed from
``../shared/data/sst2/train.tsv`` (read in place, never copied), the full ``dev.tsv``, fp32 on
the CPU, batch 32, one epoch, the same settings as ``benchmarks/executor_vs_hf.py``
(``benchmarks._runs.train_config``) with one knob changed per setting:

- ``full``: the baseline (full fine-tuning, max_length 64, lr 5e-5);
- ``lora-r8`` / ``lora-r16``: ``finetune: lora`` with that rank (alpha 2 x rank, lr 5e-4);
  ``lora-r8-lr2e-3``: rank 8 at lr 2e-3;
- ``grad-ckpt``: ``gradient_checkpointing: true``;
- ``auto-len``: ``max_length: auto`` (99.5th percentile);
- ``workers-1`` / ``workers-2``: ``num_workers`` 1 / 2 (DataLoader collation).

For each: training samples/s (training loop only), peak RSS during training, dev accuracy,
trainable parameters. Every run is a fresh subprocess; settings alternate within a repetition
and the order rotates between repetitions. Run from the repository root on a quiet machine::

    python -m benchmarks.knobs [--reps 2] [--settings full,lora-r8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._runs import DEFAULT_DATA_DIR, REPO_ROOT, environment, load_sst2, train_config

LORA_LEARNING_RATE = 5e-4
SETTINGS: dict[str, dict[str, Any]] = {
    "full": {},
    "lora-r8": {"finetune": "lora", "lora_rank": 8, "learning_rate": LORA_LEARNING_RATE},
    "lora-r16": {"finetune": "lora", "lora_rank": 16, "learning_rate": LORA_LEARNING_RATE},
    "lora-r8-lr2e-3": {"finetune": "lora", "lora_rank": 8, "learning_rate": 2e-3},
    "grad-ckpt": {"gradient_checkpointing": True},
    "auto-len": {"max_length": "auto"},
    "workers-1": {"num_workers": 1},
    "workers-2": {"num_workers": 2},
}


def child_main(spec: dict[str, Any], out: Path) -> None:
    """One measured run in this (fresh) process."""
    from trial_executor import run_trial

    data = load_sst2(Path(spec["data_dir"]), spec["rows"], spec["seed"])
    config = train_config("fp32", False, spec["seed"]).replace(**SETTINGS[spec["setting"]])
    result = run_trial(config, data)
    out.write_text(json.dumps({
        "samples_per_s": result.throughput_samples_per_s, "peak_memory_mb": result.peak_memory_mb,
        "accuracy": result.metrics["accuracy"], "trainable_params": result.trainable_params,
        "trainable_fraction": result.trainable_fraction, "max_length": result.max_length,
        "truncated_fraction": result.truncated_fraction, "train_seconds": result.train_seconds,
        "environment": environment(),
    }))


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="knobs-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "benchmarks.knobs", "--one", json.dumps(spec), "--out", str(out)]
        done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not out.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
            return {"error": f"exit {done.returncode}: {tail}"}
        return json.loads(out.read_text())


def render(results: dict[str, list[dict[str, Any]]], reps: int) -> str:
    lines = [
        f"| setting | samples/s (median of {reps}) | peak RSS MB | dev acc | trainable params | max_length (truncated) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    base = statistics.median(r["samples_per_s"] for r in results.get("full", [{"samples_per_s": 0}]) if "error" not in r) or None
    for name, runs in results.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            lines.append(f"| {name} | failed: {runs[0]['error'][:80]} | | | | |")
            continue
        speed = statistics.median(r["samples_per_s"] for r in ok)
        ratio = f" ({speed / base:.2f}x)" if base else ""
        first = ok[0]
        lines.append(
            f"| {name} | {speed:.1f}{ratio} | {statistics.median(r['peak_memory_mb'] for r in ok):.0f} | "
            f"{statistics.median(r['accuracy'] for r in ok):.4f} | {first['trainable_params']:,} "
            f"({first['trainable_fraction']:.2%}) | {first['max_length']} ({first['truncated_fraction']:.1%}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.knobs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", default=None, help="write every run's result here")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        child_main(json.loads(args.one), Path(args.out))
        return 0
    settings = [s.strip() for s in args.settings.split(",")]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting {unknown[0]!r}; choose from {', '.join(SETTINGS)}")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    for rep in range(args.reps):
        order = settings[rep % len(settings):] + settings[: rep % len(settings)]
        for name in order:
            spec = {"setting": name, "rows": args.rows, "seed": args.seed, "data_dir": args.data_dir}
            result = run_child(spec, args.timeout)
            results[name].append(result)
            shown = result.get("error") or (
                f"{result['samples_per_s']:.1f} samples/s  {result['peak_memory_mb']:.0f} MB  acc {result['accuracy']:.4f}"
            )
            print(f"rep {rep + 1} {name:<10} {shown}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print()
    print(render(results, args.reps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
