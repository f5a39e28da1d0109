"""Our trial executor against Hugging Face ``Trainer`` and a hand-written PyTorch loop, on the CPU.

What it measures, with model ``minilm-l6``, ``--rows`` (2,000) SST-2 training rows sampled with a
fixed seed from ``../shared/data/sst2/train.tsv`` and the full ``dev.tsv`` (872 rows), batch 32,
max_length 64, lr 5e-5, one epoch, no warmup, no weight decay, clipping at 1.0, linear schedule:

1. For each of {fp32, bf16} x {random order, length grouping}: training samples/s (median over
   ``--reps`` repetitions) of ``run_trial`` and of ``Trainer.train()``, their ratio, both dev
   accuracies, and the padding efficiency (real / padded tokens) of both.
2. Overhead: ``run_trial`` against a minimal hand-written loop on the very same batches (our
   batching helpers, same seed, same model load, same fused AdamW, same autocast); target
   ours / hand-written >= 0.97.
3. Memory: ``--rss-trials`` (5) consecutive ``run_trial`` calls in one process; peak RSS
   (VmHWM; ``run_trial`` resets it when its training loop starts) after the last trial must be
   within 10% of that after the first.

Every measured run is a fresh subprocess (no warm caches carried from one tool to the other),
and the tools alternate within each repetition (the order rotates from one repetition to the
next). Samples/s always counts the training loop only: model loading, tokenization, optimizer
creation and evaluation are excluded for every tool.

Run from the repository root (the full run takes a long time on a small CPU; use a quiet machine)::

    python -m benchmarks.executor_vs_hf [--json results.json]
    python -m benchmarks.executor_vs_hf --reps 1 --rows 200 --settings fp32-random   # smoke run

``HF_HUB_OFFLINE=1`` is set for the child processes; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks._children import run_module_child
from benchmarks._hf_runs import run_hf
from benchmarks._runs import (
    BATCH_SIZE,
    DEFAULT_DATA_DIR,
    HAND_TARGET,
    LEARNING_RATE,
    MAX_GRAD_NORM,
    MAX_LENGTH,
    MODEL,
    RSS_TOLERANCE,
    SETTINGS,
    TOOL_TITLES,
    TOOLS,
    environment,
    load_sst2,
    run_hand,
    run_ours,
    run_rss,
)

if TYPE_CHECKING:
    from trial_executor import TextClassificationData

RUNNERS: dict[str, Callable[[dict[str, Any], TextClassificationData], dict[str, Any]]] = {
    "ours": run_ours, "hf": run_hf, "hand": run_hand, "rss": run_rss,
}

def child_main(spec: dict[str, Any], out: Path) -> None:
    """One measured run in this (fresh) process; the result goes to ``out`` as JSON."""
    data = load_sst2(Path(spec["data_dir"]), spec["rows"], spec["seed"], spec.get("dev_rows", 0))
    result = RUNNERS[spec["tool"]](spec, data)
    result["environment"] = environment()
    result["model"] = MODEL
    out.write_text(json.dumps(result))


# --------------------------------------------------------------------------- orchestration


@dataclass
class Run:
    tool: str
    setting: str
    rep: int
    result: dict[str, Any] | None
    error: str | None = None


def run_child(spec: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str | None]:
    """Run ``spec`` in a fresh interpreter; (result, None) or (None, the error's tail)."""
    return run_module_child("benchmarks.executor_vs_hf", spec, timeout)


def _median(runs: list[Run], key: str) -> float | None:
    values = [r.result[key] for r in runs if r.result is not None and r.result.get(key) is not None]
    return statistics.median(values) if values else None


def _spread(runs: list[Run], key: str) -> list[float]:
    return [r.result[key] for r in runs if r.result is not None and r.result.get(key) is not None]


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _acc(runs: list[Run]) -> str:
    values = _spread(runs, "accuracy")
    if not values:
        return "n/a"
    low, high = min(values), max(values)
    return f"{statistics.median(values):.4f}" if high - low < 1e-9 else f"{statistics.median(values):.4f} ({low:.4f}-{high:.4f})"


def summarize(runs: list[Run], settings: list[str], tools: list[str]) -> dict[str, Any]:
    rows = []
    for setting in settings:
        by_tool = {tool: [r for r in runs if r.setting == setting and r.tool == tool] for tool in tools}
        row: dict[str, Any] = {"setting": setting}
        for tool, tool_runs in by_tool.items():
            row[tool] = {
                "samples_per_s_median": _median(tool_runs, "samples_per_s"),
                "samples_per_s_all": _spread(tool_runs, "samples_per_s"),
                "accuracy_median": _median(tool_runs, "accuracy"),
                "accuracy_all": _spread(tool_runs, "accuracy"),
                "padding_efficiency": _median(tool_runs, "padding_efficiency"),
                "errors": [r.error for r in tool_runs if r.error],
            }
        ours = row.get("ours", {}).get("samples_per_s_median")
        for other in ("hf", "hand"):
            theirs = row.get(other, {}).get("samples_per_s_median")
            row[f"ratio_ours_{other}"] = ours / theirs if ours and theirs else None
        rows.append(row)
    return {"rows": rows}


RunsBySettingAndTool = dict[tuple[str, str], list[Run]]


def render(summary: dict[str, Any], runs: list[Run], tools: list[str], rss: dict[str, Any] | None, reps: int) -> str:
    """The report's markdown tables: ours against HF, ours against the hand-written loop, one tool alone, the RSS check."""
    if not runs:  # --reps 0: the RSS check alone
        tools = []
    by = {(r.setting, r.tool): [x for x in runs if x.setting == r.setting and x.tool == r.tool] for r in runs}
    lines: list[str] = []
    if "ours" in tools and "hf" in tools:
        lines += _hf_table(summary, by, reps)
    if "ours" in tools and "hand" in tools:
        lines += _hand_table(summary, by)
    if tools and (len(tools) == 1 or "ours" not in tools):
        lines += _tools_table(summary, by, tools)
    if rss is not None:
        lines += _rss_lines(rss)
    return "\n".join(lines)


def _hf_table(summary: dict[str, Any], by: RunsBySettingAndTool, reps: int) -> list[str]:
    lines = [
        f"Our executor vs HF Trainer (training samples/s, median of {reps}; accuracy on SST-2 dev)",
        "",
        "| setting | ours samples/s | HF samples/s | ours/HF | ours acc | HF acc | ours pad eff | HF pad eff |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in summary["rows"]:
        s = row["setting"]
        lines.append(
            f"| {s} | {_fmt(row['ours']['samples_per_s_median'], '.1f')} | {_fmt(row['hf']['samples_per_s_median'], '.1f')}"
            f" | {_fmt(row['ratio_ours_hf'], '.3f')} | {_acc(by.get((s, 'ours'), []))} | {_acc(by.get((s, 'hf'), []))}"
            f" | {_fmt(row['ours']['padding_efficiency'], '.3f')} | {_fmt(row['hf']['padding_efficiency'], '.3f')} |"
        )
    return [*lines, ""]


def _hand_table(summary: dict[str, Any], by: RunsBySettingAndTool) -> list[str]:
    lines = [
        f"Overhead against a hand-written loop on the same batches (target ours/hand-written >= {HAND_TARGET})",
        "",
        "| setting | ours samples/s | hand-written samples/s | ours/hand-written | ours acc | hand-written acc | target |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in summary["rows"]:
        s, ratio = row["setting"], row["ratio_ours_hand"]
        verdict = "n/a" if ratio is None else ("PASS" if ratio >= HAND_TARGET else "FAIL")
        lines.append(
            f"| {s} | {_fmt(row['ours']['samples_per_s_median'], '.1f')} | {_fmt(row['hand']['samples_per_s_median'], '.1f')}"
            f" | {_fmt(ratio, '.3f')} | {_acc(by.get((s, 'ours'), []))} | {_acc(by.get((s, 'hand'), []))} | {verdict} |"
        )
    return [*lines, ""]


def _tools_table(summary: dict[str, Any], by: RunsBySettingAndTool, tools: list[str]) -> list[str]:
    lines = ["| setting | tool | samples/s (median) | acc | pad eff |", "|---|---|---:|---:|---:|"]
    for row in summary["rows"]:
        for tool in tools:
            s = row["setting"]
            lines.append(
                f"| {s} | {TOOL_TITLES[tool]} | {_fmt(row[tool]['samples_per_s_median'], '.1f')}"
                f" | {_acc(by.get((s, tool), []))} | {_fmt(row[tool]['padding_efficiency'], '.3f')} |"
            )
    return [*lines, ""]


def _rss_lines(rss: dict[str, Any]) -> list[str]:
    if rss.get("error"):
        return [f"RSS check ({rss['setting']}): failed to run: {rss['error']}"]
    first, last = rss["trials"][0], rss["trials"][-1]
    ratio = rss["hwm_ratio"]
    verdict = "PASS" if ratio <= 1 + RSS_TOLERANCE else "FAIL"
    return [
        f"RSS over {len(rss['trials'])} run_trial calls in one process ({rss['setting']}):",
        "",
        "| trial | VmHWM (peak RSS) MB | VmRSS after MB | samples/s | acc |",
        "|---:|---:|---:|---:|---:|",
        *(f"| {t['trial']} | {_fmt(t['vm_hwm_mb'], '.0f')} | {_fmt(t['vm_rss_mb'], '.0f')} | {t['samples_per_s']:.1f} | {t['accuracy']:.4f} |"
          for t in rss["trials"]),
        "",
        f"peak RSS after trial 1: {first['vm_hwm_mb']:.0f} MB, after trial {last['trial']}: {last['vm_hwm_mb']:.0f} MB,"
        f" ratio {ratio:.3f} (target <= {1 + RSS_TOLERANCE:.2f}: {verdict});"
        f" RSS after: {first['vm_rss_mb']:.0f} -> {last['vm_rss_mb']:.0f} MB (ratio {rss['rss_ratio']:.3f})",
    ]


def parse_list(value: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown) or '(none)'}; choose from {', '.join(allowed)}")
    return items


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.executor_vs_hf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions per tool and setting (default 3)")
    parser.add_argument("--rows", type=int, default=2000, help="training rows sampled from train.tsv (default 2000)")
    parser.add_argument("--dev-rows", type=int, default=0, help="first N dev rows only, for smoke runs (default 0: all 872)")
    parser.add_argument("--settings", type=lambda v: parse_list(v, list(SETTINGS), "setting"), default=list(SETTINGS),
                        help=f"comma-separated subset of {','.join(SETTINGS)}")
    parser.add_argument("--tools", type=lambda v: parse_list(v, TOOLS, "tool"), default=list(TOOLS),
                        help=f"comma-separated subset of {','.join(TOOLS)}")
    parser.add_argument("--rss-trials", type=int, default=5, help="run_trial calls in one process for the RSS check (0: skip)")
    parser.add_argument("--rss-setting", choices=list(SETTINGS), default="fp32-random")
    parser.add_argument("--seed", type=int, default=0, help="row sampling and training seed (default 0)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help=f"SST-2 directory (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--hf-dataset", choices=["datasets", "list"], default="datasets",
                        help="HF training set as a datasets.Dataset (default, the usual pipeline) or a list of dicts")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per child run")
    parser.add_argument("--json", type=Path, help="also write all results as JSON to this path")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    return parser


def _measure(args: argparse.Namespace, base: dict[str, Any]) -> list[Run]:
    """Every tool on every setting, ``args.reps`` times, each run in a fresh process; a line per run as it ends."""
    total = args.reps * len(args.settings) * len(args.tools)
    print(f"{total} runs ({args.reps} reps x {len(args.settings)} settings x {len(args.tools)} tools), each in a fresh process,"
          f" {args.rows} training rows, seed {args.seed}", flush=True)
    runs: list[Run] = []
    for rep in range(args.reps):
        for s_index, setting in enumerate(args.settings):
            # Rotate the order so no tool always runs first (or right after a given other tool).
            shift = (rep + s_index) % len(args.tools)
            for tool in args.tools[shift:] + args.tools[:shift]:
                tick = time.perf_counter()
                result, error = run_child({**base, "tool": tool, "setting": setting}, args.timeout)
                runs.append(Run(tool, setting, rep, result, error))
                wall, head = time.perf_counter() - tick, f"[{len(runs)}/{total}] rep {rep + 1} {setting:12s} {TOOL_TITLES[tool]:12s}"
                if result is None:
                    print(f"{head} FAILED ({wall:.0f} s): {error}", flush=True)
                    continue
                detail = f"  [{result['sampler']}, mixed_precision={result['mixed_precision']}]" if tool == "hf" else ""
                print(f"{head} {result['samples_per_s']:7.1f} samples/s  acc {result['accuracy']:.4f}"
                      f"  train {result['train_seconds']:.1f} s  ({wall:.0f} s in all){detail}", flush=True)
    return runs


def _rss_check(args: argparse.Namespace, base: dict[str, Any]) -> dict[str, Any]:
    """``args.rss_trials`` run_trial calls in one fresh process: peak and current RSS after each, and the verdict."""
    print(f"RSS check: {args.rss_trials} run_trial calls in one process ({args.rss_setting}) ...", flush=True)
    result, error = run_child({**base, "tool": "rss", "setting": args.rss_setting, "trials": args.rss_trials}, args.timeout)
    if result is None:
        return {"setting": args.rss_setting, "error": error}
    trials = result["trials"]
    return {
        "setting": args.rss_setting,
        "before": result["before"],
        "trials": trials,
        "hwm_ratio": trials[-1]["vm_hwm_mb"] / trials[0]["vm_hwm_mb"],
        "rss_ratio": trials[-1]["vm_rss_mb"] / trials[0]["vm_rss_mb"],
        "pass": trials[-1]["vm_hwm_mb"] <= (1 + RSS_TOLERANCE) * trials[0]["vm_hwm_mb"],
        "environment": result.get("environment"),
    }


def _write_json(args: argparse.Namespace, base: dict[str, Any], report: dict[str, Any]) -> None:
    payload = {
        "config": {**base, "reps": args.reps, "settings": args.settings, "tools": args.tools, "model": MODEL,
                   "batch_size": BATCH_SIZE, "max_length": MAX_LENGTH, "learning_rate": LEARNING_RATE,
                   "max_grad_norm": MAX_GRAD_NORM},
        **report,
        "runs": [{"tool": r.tool, "setting": r.setting, "rep": r.rep, "result": r.result, "error": r.error} for r in report["runs"]],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {args.json}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.one:
        child_main(json.loads(args.one), args.out)
        return 0

    base = {"rows": args.rows, "dev_rows": args.dev_rows, "seed": args.seed, "data_dir": str(args.data_dir.resolve()),
            "hf_dataset": args.hf_dataset}
    for name in ("train.tsv", "dev.tsv"):
        if not (args.data_dir / name).is_file():
            parser.error(f"{args.data_dir / name} not found; pass --data-dir")
    runs = _measure(args, base)
    rss = _rss_check(args, base) if args.rss_trials > 0 else None
    rss_environment = rss.pop("environment", None) if rss else None
    env_info = next((r.result.get("environment") for r in runs if r.result is not None), None) or rss_environment
    summary = summarize(runs, args.settings, args.tools)
    print()
    if env_info:
        print(f"torch {env_info['torch']}, transformers {env_info['transformers']}, accelerate {env_info['accelerate']},"
              f" {env_info['torch_threads']} torch threads, {env_info['cpu_count']} CPUs; model {MODEL}, {args.rows} train rows,"
              f" dev {'all' if not args.dev_rows else args.dev_rows} rows")
        print()
    print(render(summary, runs, args.tools, rss, args.reps))
    if args.json:
        _write_json(args, base, {"environment": env_info, "summary": summary, "rss": rss, "runs": runs})
    failed = [r for r in runs if r.error] + ([rss] if rss and rss.get("error") else [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
