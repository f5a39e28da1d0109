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
from collections.abc import Sequence

from hpo._errors import did_you_mean
from hpo.cli._check_models import CHECK_MODELS, DEFAULT_CHECK_MODEL
from hpo.cli._parsing import Parser, at_least, command_prog
from trial_executor import PRECISIONS

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
    for knob in KNOBS:  # issue 23: measure each on and off (default: the device's default)
        parser.add_argument(f"--{knob.replace('_', '-')}", choices=("on", "off"), default=None, help=f"{knob} for the step")
    return parser


KNOBS = ("compile_step", "capture_step", "torch_compile", "varlen_attention", "master_weights")


# Per device: model, seq_len, batch sizes, steps, warmup when the flag is not given.
_DEFAULTS = {"cpu": (DEFAULT_CHECK_MODEL, 64, [8], 3, 1), "cuda": ("bert-base-random", 128, [32, 256], 20, 10)}


def fill_defaults(args: argparse.Namespace, device_type: str) -> None:
    """The flags not given, set to ``device_type``'s defaults (``"cuda"``: what a study on a GPU sees)."""
    model, seq_len, batch_sizes, steps, warmup = _DEFAULTS.get(device_type, _DEFAULTS["cpu"])
    args.model = args.model or model
    args.seq_len = args.seq_len or seq_len
    args.batch_size = args.batch_size or batch_sizes
    args.steps = args.steps or steps
    args.warmup = warmup if args.warmup is None else args.warmup


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; return the process exit code."""
    args = build_parser().parse_args(argv)
    # torch and transformers load only now (seconds): --help and a mistyped flag answer before them.
    from hpo.cli._check_report import print_report

    return print_report(args)
