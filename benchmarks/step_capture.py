"""The whole training step as one CUDA graph, by hand, against the executor's eager and compiled steps (issue 23).

Session 23 (H200) found the compiled step (``compile_step``: the forward with its loss and backward
as CUDA graphs through ``torch.compile``, the update compiled without them) still host-limited
at batch 32 (BERT-base bf16: 13.6 ms a step, 10.2 of them the host's), and compiling 5-65 s per
trial: 98% of the training time of a 10-trial MiniLM study. Issue 23 names a third way: a
manual ``torch.cuda.graph`` of the whole step after a warm-up on a side stream. No compiler
(a capture takes about as long as a few steps), and one replay a step: the host copies the
batch into the graph's input tensors and replays.

Each variant runs in a fresh process on the executor's own parts (``hpo.check``'s random-token
batch through ``trial_executor.train.build_step``):

- ``eager``: the eager step (``compile_step`` off);
- ``compiled``: the compiled step (``compile_step`` on);
- ``captured`` (CUDA only): the captured step (``capture_step`` on: ``trial_executor.train._captured``),
  the compiled step's two regions uncompiled (the forward with its weighted loss under the
  precision's autocast, its cache of cast weights off, the backward, clipping and the capturable
  AdamW with its learning rate a device tensor), recorded as one CUDA graph after a step on a side
  stream, then replayed; the learning rate is filled in place between replays, as every step does.

Per variant and precision: the first steps' seconds (compiling or capturing), ms a step, the
host's ms to issue one, the loss after the timed steps (the same batch every step, from the
same seed), and on CUDA the peak MB allocated and reserved (a recording's pool beside the
allocator's cache). Dropout draws differ between the variants; with ``--no-dropout`` every variant computes
the same function, so the losses must agree to rounding (the compiled step's fused kernels
round differently): a captured step that lost an update or doubled a gradient shows. Run
from the repository root::

    python -m benchmarks.step_capture --device cuda [--model bert-base-random] [--batch-size 32] [--seq-len 128]
        [--precisions fp32,bf16] [--variants eager,compiled,captured] [--steps 30] [--no-dropout]

A dry run on the CPU: ``--device cpu --model tiny-bert --batch-size 4 --seq-len 16 --steps 2 --no-dropout``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks._children import error_line, run_module_child

VARIANTS = ("eager", "compiled", "captured")
WARMUP_STEPS = 3  # steps before the timed first one (the captured step warms up and records among them)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_variant(variant: str, precision: str, args: argparse.Namespace) -> dict[str, Any]:
    """Time ``variant``'s step in ``precision``: first steps apart, then ``args.steps`` steps, the host's share, the loss."""
    from hpo.cli._check_models import model_config
    from hpo.cli._speed_test import _executor_step
    from trial_executor import PrecisionPolicy
    from trial_executor.batches import window_rows

    device = torch.device(args.device)
    policy = PrecisionPolicy.resolve(precision, device)
    policy.apply_global_state(cudnn_benchmark=False)
    knobs = {"eager": {}, "compiled": {"compile_step": True}, "captured": {"capture_step": True}}[variant]
    config = model_config(args.model)
    if args.no_dropout:  # every variant then computes the same function: losses comparable to rounding
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "dropout", "attention_dropout"):
            if getattr(config, name, None):
                setattr(config, name, 0.0)
    step, window, resolved = _executor_step(policy, config, device, args.batch_size, args.seq_len, 0, knobs)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()

    def one() -> None:
        step(window)

    for _ in range(WARMUP_STEPS + 1):  # the captured step's warm-up and recording among them; the same updates in every variant
        one()
    _sync(device)
    first = time.perf_counter() - start
    for _ in range(args.warmup):
        one()
    issued = []
    for _ in range(3):
        _sync(device)
        tick = time.perf_counter()
        one()
        issued.append(time.perf_counter() - tick)
    _sync(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        one()
    _sync(device)
    seconds = time.perf_counter() - start
    step.loss_sum.zero_()
    one()
    return {
        "variant": variant, "precision": precision, "whole_step": resolved.compile_step, "first_s": first,
        "ms_per_step": seconds / args.steps * 1000, "host_ms": statistics.median(issued) * 1000,
        "loss": float(step.loss_sum.item()) / window_rows(window), "steps": WARMUP_STEPS + 2 + args.warmup + 3 + args.steps,
        "peak_mb": _peak_mb(device),
    }


def _peak_mb(device: torch.device) -> str:
    """The device's peak MB allocated / reserved (the allocator's cache and the graphs' pool included); ``-`` off CUDA."""
    if device.type != "cuda":
        return "-"
    return f"{torch.cuda.max_memory_allocated(device) / 2**20:.0f} / {torch.cuda.max_memory_reserved(device) / 2**20:.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_capture", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--model", default="bert-base-random")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-dropout", action="store_true", help="dropout off: the variants' losses comparable")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a child: one variant (benchmarks._children.run_module_child)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _check(parser, args)
    if args.one:
        spec = json.loads(args.one)
        Path(args.out).write_text(json.dumps(run_variant(spec.pop("variant"), spec.pop("precision"), argparse.Namespace(**spec))))
        return 0
    print(f"{args.model}, batch {args.batch_size} x {args.seq_len} tokens, {args.steps} timed steps on {args.device}")
    print("| variant | precision | first steps s | ms/step | host ms to issue a step | loss after | steps | peak MB allocated / reserved | note |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for precision in args.precisions.split(","):
        for variant in args.variants.split(","):
            print(_row(variant, precision, args), flush=True)
    return 0


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every flag, before any cell runs (a GPU call has minutes): one line and exit 2 for a bad one."""
    from trial_executor import PRECISIONS

    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
    unknown = [p for p in args.precisions.split(",") if p not in PRECISIONS]
    if unknown:
        parser.error(f"unknown precision {unknown[0]!r}; choose from {', '.join(PRECISIONS)}")
    if args.steps < 1 or args.warmup < 0 or args.batch_size < 1 or args.seq_len < 8:
        parser.error("--steps and --batch-size must be at least 1, --seq-len at least 8, --warmup at least 0")


def _row(variant: str, precision: str, args: argparse.Namespace) -> str:
    """One variant and precision in a fresh process (a crash or a hang costs that row only)."""
    if variant == "captured" and args.device != "cuda":
        return f"| {variant} | {precision} | | | | | | | CUDA only |"
    if variant == "captured" and precision == "fp16":  # the compiled step refuses fp16: there are no regions to capture
        return f"| {variant} | {precision} | | | | | | | not for fp16: its GradScaler is not captured |"
    spec = {**{k: v for k, v in vars(args).items() if k not in ("one", "out", "variants", "precisions")},
            "variant": variant, "precision": precision}
    r, error = run_module_child("benchmarks.step_capture", spec, args.timeout)
    if r is None:
        return f"| {variant} | {precision} | | | | | | | {error_line(error)} |"
    note = "" if variant == "eager" or r["whole_step"] else "the whole step refused for this precision: eager"
    return (f"| {variant} | {precision} | {r['first_s']:.1f} | {r['ms_per_step']:.1f} | {r['host_ms']:.1f} | {r['loss']:.4f} "
            f"| {r['steps']} | {r['peak_mb']} | {note} |")


if __name__ == "__main__":
    sys.exit(main())
