"""``python -m hpo.check``: what this machine can run, and how fast, in each precision.

Prints the hardware report every trial records, which precisions the device supports (and
why not), and a short speed test: a few training steps of a random-init BERT on random
tokens under each precision's autocast policy, with time per step, speedup against fp32 and
peak memory. Use ``--model bert-base-random`` on a GPU for realistic figures.

examples:
  %(prog)s                                        # short check on this machine's default device
  %(prog)s --device cuda                          # bert-base-random, batch 32 and 256 x 128 tokens
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import torch

from hpo._errors import did_you_mean
from hpo.cli._parsing import Parser, at_least, command_prog
from hpo.cli._speed_test import CHECK_MODELS, DEFAULT_CHECK_MODEL, SpeedRow, model_config, parameter_count, speed_test
from trial_executor import PRECISIONS, TrainConfig, hardware_metadata, precision_support, resolve_device
from trial_executor._precisions import BY_NAME
from trial_executor.device import HOST_LIMITED_BELOW
from trial_executor.precision import cpu_instructions, emulated_precisions

PROG = command_prog("check")


def _model(name: str) -> str:
    if name not in CHECK_MODELS:
        hint = did_you_mean(name, list(CHECK_MODELS))
        raise argparse.ArgumentTypeError(f"unknown model {name!r}; {hint}choose one of {', '.join(CHECK_MODELS)}")
    return name


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(PROG, __doc__)
    # The defaults keep a CPU check short; on a GPU they are what a study sees: bert-base, batch 32 and 256 x 128 tokens.
    parser.add_argument(
        "--model", type=_model, default=None,
        help=f"random-init model: {', '.join(CHECK_MODELS)} (default: {DEFAULT_CHECK_MODEL} on the CPU, bert-base-random on CUDA)",
    )
    parser.add_argument("--seq-len", type=at_least(8), default=None, help="tokens per row (default: 64 on the CPU, 128 on CUDA)")
    parser.add_argument(
        "--batch-size", type=at_least(1), action="append", default=None,
        help="rows per step; repeat for several (default: 8 on the CPU, 32 and 256 on CUDA)",
    )
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="where the speed test runs (default: %(default)s)")
    parser.add_argument("--steps", type=at_least(1), default=None, help="timed steps per precision (default: 3 on the CPU, 20 on CUDA)")
    parser.add_argument(
        "--warmup", type=at_least(0), default=None,
        help="untimed steps first; on CUDA more until steady (default: 1 on the CPU, 10 on CUDA)",
    )
    parser.add_argument(
        "--precision", choices=PRECISIONS, action="append", default=None,
        help="time only this precision; repeat for several (default: all; speedups need fp32 among them)",
    )
    for knob in _KNOBS:  # issue 23: measure each on and off (default: the device's default)
        parser.add_argument(f"--{knob.replace('_', '-')}", choices=("on", "off"), default=None, help=f"{knob} for the step")
    return parser


_KNOBS = ("compile_step", "capture_step", "torch_compile", "varlen_attention", "master_weights")


# Per device: model, seq_len, batch sizes, steps, warmup when the flag is not given.
_DEFAULTS = {"cpu": (DEFAULT_CHECK_MODEL, 64, [8], 3, 1), "cuda": ("bert-base-random", 128, [32, 256], 20, 10)}


def _fill_defaults(args: argparse.Namespace, device: torch.device) -> None:
    model, seq_len, batch_sizes, steps, warmup = _DEFAULTS.get(device.type, _DEFAULTS["cpu"])
    args.model = args.model or model
    args.seq_len = args.seq_len or seq_len
    args.batch_size = args.batch_size or batch_sizes
    args.steps = args.steps or steps
    args.warmup = warmup if args.warmup is None else args.warmup


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def speed_table(rows: Sequence[SpeedRow]) -> list[str]:
    lines = [
        "| precision | ms/step | samples/s | speedup vs fp32 | peak MB | final loss | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        speedup = _fmt(r.speedup, ".2f") + ("x" if r.speedup is not None else "")
        lines.append(
            f"| {r.precision} | {_fmt(r.ms_per_step, '.1f')} | {_fmt(r.samples_per_s, '.1f')} | {speedup} "
            f"| {_fmt(r.peak_memory_mb, '.0f')} | {_fmt(r.final_loss, '.4f')} | {r.note} |"
        )
    return lines


def host_table(rows: Sequence[SpeedRow]) -> list[str]:
    """Who set the pace on a GPU: the host's time to issue a step against the step's time."""
    lines = [
        "",
        "| precision | host ms to issue a step | host share of step time | steps the device set the pace of | host-limited |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        limited = "-" if r.device_busy is None else ("yes" if r.device_busy < HOST_LIMITED_BELOW else "no")
        share = _fmt(r.host_share, ".2f")
        lines.append(f"| {r.precision} | {_fmt(r.host_ms_per_step, '.1f')} | {share} | {_fmt(r.device_busy, '.0%')} | {limited} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; return the process exit code."""
    args = build_parser().parse_args(argv)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        device = resolve_device(args.device)
    except RuntimeError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    _fill_defaults(args, device)
    max_len = model_config(args.model).max_position_embeddings
    if args.seq_len > max_len:
        print(f"{PROG}: error: --seq-len {args.seq_len} is longer than {args.model}'s {max_len} positions; pass --seq-len {max_len} or less", file=sys.stderr)
        return 2
    knobs = {knob: getattr(args, knob) == "on" for knob in _KNOBS if getattr(args, knob) is not None}
    try:  # before the report starts: the knobs the speed test's TrainConfig would refuse, by its own rules
        TrainConfig(**knobs)
    except ValueError as err:
        given = " ".join(f"--{knob.replace('_', '-')} {getattr(args, knob)}" for knob in knobs if knob in str(err))  # those it names
        print(f"{PROG}: error: {given}: {err}", file=sys.stderr)
        return 2
    print("Hardware")
    for key, value in hardware_metadata(device).items():
        print(f"  {key}: {value}")
    print(f"  logical_cpus: {os.cpu_count()}")  # cpu_threads above: how many of them torch trains on
    flags = cpu_instructions()
    if device.type == "cpu" and flags:
        native = sorted({f for row in BY_NAME.values() for f in row.cpu_instructions if f in flags})
        emulated = emulated_precisions(device, flags)
        print(f"  cpu_low_precision_instructions: {', '.join(native) or 'none'}"
              + (f" ({', '.join(emulated)} autocast emulated: expect it slower than fp32)" if emulated else ""))
    print("Precision support")
    for precision, reason in precision_support(device).items():
        print(f"  {precision}: {'supported' if reason is None else 'unsupported: ' + reason}")
    for batch_size in args.batch_size:
        print(
            f"\nSpeed test: {args.model} ({parameter_count(args.model) / 1e6:.1f}M parameters, random init), "
            f"batch {batch_size} x {args.seq_len} tokens, {args.warmup} warmup + {args.steps} timed steps "
            f"of the executor's training step (forward, backward, AdamW) on {device}",
            flush=True,
        )
        knobs = {k: getattr(args, k) == "on" for k in _KNOBS if getattr(args, k) is not None}
        rows = speed_test(
            args.model, device, batch_size=batch_size, seq_len=args.seq_len, steps=args.steps, warmup=args.warmup, knobs=knobs,
            precisions=args.precision or PRECISIONS,
        )
        print("\n".join(speed_table(rows)))
        if device.type == "cuda":
            print("\n".join(host_table(rows)))
    if device.type == "cpu":
        print("\nPeak memory on the CPU is the process's peak RSS (python and torch included); a trial records its own "
              "peak above what the process held when it began.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
