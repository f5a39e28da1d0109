"""``hpo check``'s report once its flags are read: the hardware, each precision's support, the speed tables.

Imports torch and transformers (seconds), which is why :mod:`hpo.cli._check` reads the flags
without this module and imports it only for a check that runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from hpo.cli._check import KNOBS, PROG, fill_defaults
from hpo.cli._check_models import model_config
from hpo.cli._speed_test import SpeedRow, parameter_count, speed_test
from trial_executor import PRECISIONS, TrainConfig, hardware_metadata, precision_support, resolve_device
from trial_executor._precisions import BY_NAME
from trial_executor.device import HOST_LIMITED_BELOW
from trial_executor.precision import cpu_instructions, emulated_precisions


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


def print_report(args: argparse.Namespace) -> int:
    """Print the report for the parsed flags of ``hpo check``; return the process exit code."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        device = resolve_device(args.device)
    except RuntimeError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    fill_defaults(args, device.type)
    max_len = model_config(args.model).max_position_embeddings
    if args.seq_len > max_len:
        print(f"{PROG}: error: --seq-len {args.seq_len} is longer than {args.model}'s {max_len} positions; pass --seq-len {max_len} or less", file=sys.stderr)
        return 2
    knobs = {knob: getattr(args, knob) == "on" for knob in KNOBS if getattr(args, knob) is not None}
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
        knobs = {k: getattr(args, k) == "on" for k in KNOBS if getattr(args, k) is not None}
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

