"""Ours against HF Trainer and a plain PyTorch loop (eager and compiled), on a GPU, in one table.

The matrix: tools {ours, HF Trainer, plain loop, plain loop + ``torch.compile``} x precisions
{fp32, tf32, fp16, bf16} x batch sizes {32, 64, 256} x rows {SST-2 sentences as they are,
128-token rows of 8 joined sentences}. Every cell is a fresh process; every tool is timed alike
(steady-state training samples/s after warm-up, see :mod:`benchmarks._gpu_runs`). The table
gives samples/s per tool, ours / HF Trainer, ours / the best plain loop, and ours' speedup over
our fp32 in the same row set and batch size (the issue-12 acceptance figures).

On a GPU (the model: a directory with config and tokenizer, e.g. the kit's ``/tmp/bert-base``)::

    python -m benchmarks.gpu --model /tmp/bert-base --json gpu.json

On the CPU, a dry run that checks every tool runs end to end (tiny random model, few rows)::

    python -m benchmarks.gpu --device cpu --quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._gpu_runs import OURS_VARIANTS, RUNNERS, read_rows

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "sst2"
TOOLS = ("ours", "hf", "plain", "plain-compiled")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
BATCHES = (32, 64, 256)
ROW_KINDS = ("sst2", "long")
QUICK = {"rows": 384, "batches": (32,), "precisions": ("fp32", "bf16")}


def prepare_model(kind: str, directory: Path, texts: list[str]) -> str:
    """A random-init BERT (``bert-base-random`` or ``tiny-random``) saved with a tokenizer fitted to ``texts``."""
    from transformers import BertConfig, BertForSequenceClassification

    from trial_executor.model import train_wordpiece_tokenizer

    tokenizer = train_wordpiece_tokenizer(texts, vocab_size=30522 if kind == "bert-base-random" else 2000)
    sizes = {} if kind == "bert-base-random" else {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                                                    "intermediate_size": 128}
    config = BertConfig(vocab_size=len(tokenizer), num_labels=2, pad_token_id=tokenizer.pad_token_id, **sizes)
    import torch

    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def run_cell(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One cell in a fresh interpreter: its result, or its error's last line."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    out = Path(spec["scratch"]) / "cell.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "benchmarks.gpu", "--one", json.dumps(spec), "--out", str(out)]
    try:
        done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0 or not out.is_file():
        lines = (done.stdout + done.stderr).strip().splitlines()
        return {"error": f"exit {done.returncode}: {lines[-1] if lines else ''}"}
    return json.loads(out.read_text())


def _fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def _flag(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def table(cells: dict[tuple[str, int, str, str], dict[str, Any]], kinds: Sequence[str], batches: Sequence[int],
          precisions: Sequence[str]) -> list[str]:
    """One Markdown table: a row per (rows, batch, precision), a column per tool, then the ratios."""
    lines = [
        "| rows | batch | precision | ours | HF Trainer | plain | plain compiled | ours/HF | ours/best plain "
        "| ours vs our fp32 | ours host-limited | ours compile s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    lines += _rows(cells, kinds, batches, precisions)
    variants = sorted({tool for *_, tool in cells if tool in OURS_VARIANTS and tool != "ours"})
    if variants:  # our knobs on (each its own column) against the defaults (all off)
        lines += ["", "| rows | batch | precision | ours | " + " | ".join(variants) + " |",
                  "|---|---:|---|---:|" + "---:|" * len(variants)]
        for kind in kinds:
            for batch in batches:
                for precision in precisions:
                    speed = [cells.get((kind, batch, precision, t), {}).get("samples_per_s") for t in ("ours", *variants)]
                    lines.append(f"| {kind} | {batch} | {precision} | " + " | ".join(_fmt(v) for v in speed) + " |")
    return lines


def _rows(cells: dict[tuple[str, int, str, str], dict[str, Any]], kinds: Sequence[str], batches: Sequence[int],
          precisions: Sequence[str]) -> list[str]:
    lines = []
    for kind in kinds:
        for batch in batches:
            fp32 = cells.get((kind, batch, "fp32", "ours"), {}).get("samples_per_s")
            for precision in precisions:
                speed = {tool: cells.get((kind, batch, precision, tool), {}).get("samples_per_s") for tool in TOOLS}
                ours = cells.get((kind, batch, precision, "ours"), {})
                plain = max((v for v in (speed["plain"], speed["plain-compiled"]) if v), default=None)
                lines.append(
                    f"| {kind} | {batch} | {precision} | " + " | ".join(_fmt(speed[t]) for t in TOOLS)
                    + f" | {_fmt(_ratio(speed['ours'], speed['hf']), '.2f')} | {_fmt(_ratio(speed['ours'], plain), '.2f')}"
                    + f" | {_fmt(_ratio(speed['ours'], fp32), '.2f')} | {_flag(ours.get('host_limited'))}"
                    + f" | {_fmt(ours.get('compile_seconds'), '.1f')} |"
                )
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--model", default="bert-base-random",
                        help="a model directory (config + tokenizer), or bert-base-random / tiny-random (built here)")
    parser.add_argument("--rows", type=int, default=8000, help="training rows per cell (default 8000)")
    parser.add_argument("--quick", action="store_true", help="tiny-random, 384 rows, batch 32, fp32 and bf16: a dry run")
    parser.add_argument("--tools", default=",".join(TOOLS),
                        help=f"comma-separated; also our knobs on: {', '.join(t for t in OURS_VARIANTS if t != 'ours')}")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--kinds", default=",".join(ROW_KINDS), help="sst2 (rows as they are), long (128-token rows)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--timeout", type=float, default=600, help="seconds per cell")
    parser.add_argument("--json", type=Path, help="also write every cell's result here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    return parser


def _not_run(tool: str, precision: str, device: str) -> str | None:
    """Why a cell is skipped (``None``: it runs): it cannot run here, or would time another cell again."""
    if precision == "tf32" and device == "cpu":
        return "tf32 is CUDA only"
    if tool == "ours-master-weights" and precision != "bf16":
        return "master weights are for bf16 only: the cell would run 'ours' again"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.one:
        spec = json.loads(args.one)
        texts, labels = read_rows(Path(spec["data_dir"]), spec["rows"], spec["kind"])
        args.out.write_text(json.dumps(RUNNERS[spec["tool"]](spec, texts, labels)))
        return 0
    if not (args.data_dir / "train.tsv").is_file():
        print(f"{args.data_dir / 'train.tsv'} not found; pass --data-dir", file=sys.stderr)
        return 2
    rows, batches = args.rows, [int(b) for b in args.batches.split(",")]
    precisions, model = args.precisions.split(","), args.model
    if args.quick:
        rows, batches, precisions, model = QUICK["rows"], list(QUICK["batches"]), list(QUICK["precisions"]), "tiny-random"
    tools, kinds = args.tools.split(","), args.kinds.split(",")
    cells: dict[tuple[str, int, str, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as scratch:
        if model in ("bert-base-random", "tiny-random"):
            model = prepare_model(model, Path(scratch) / model, read_rows(args.data_dir, 4000, "sst2", seed=1)[0])
        for kind in kinds:
            for batch in batches:
                for precision in precisions:
                    for tool in tools:
                        spec = {"tool": tool, "kind": kind, "batch": batch, "precision": precision, "rows": rows,
                                "device": args.device, "model_dir": model, "data_dir": str(args.data_dir), "scratch": scratch}
                        skipped = _not_run(tool, precision, args.device)
                        if skipped:
                            cells[(kind, batch, precision, tool)] = {"skipped": skipped}
                            continue
                        cells[(kind, batch, precision, tool)] = result = run_cell(spec, args.timeout)
                        shown = result.get("error") or f"{_fmt(result.get('samples_per_s'))} samples/s"
                        print(f"{kind:5s} batch {batch:3d} {precision} {tool:15s} {shown}", flush=True)
    print("\n".join(["", *table(cells, kinds, batches, precisions)]))
    if args.json:
        args.json.write_text(json.dumps([{"cell": list(k), **v} for k, v in cells.items()], indent=1))
    failed = [k for k, v in cells.items() if "error" in v]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
