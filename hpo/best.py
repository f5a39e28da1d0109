"""``python -m hpo.best``: the best trial of a study (its Pareto front, with several objectives) as a reusable config.

Each trial comes with its objective values, its sampled params and ``fixed``: the trial's
resolved training config (the ``config`` user attribute, run flags such as the seed left out),
which pasted into a search space's ``fixed:`` section trains that configuration again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from hpo._cli import Parser, add_storage_argument, command_prog, exit_code_of, run_storage_command
from hpo._export import best_document, best_space, best_space_yaml, best_yaml
from hpo._inspect import load_existing_study, open_existing_storage

PROG = command_prog("best")


def build_parser() -> Parser:
    parser = Parser(
        PROG, __doc__,
        epilog=(
            "examples:\n"
            f"  {PROG} --study-name precision-demo                  # YAML, fixed: block ready to paste\n"
            f"  {PROG} --study-name precision-demo --format space > best.yaml   # then: python -m hpo run --space best.yaml\n"
            f"  {PROG} --study-name sst2 --format json --storage postgresql://user:pass@db:5432/hpo"
        ),
    )
    parser.add_argument("--study-name", required=True, help="the study to read")
    add_storage_argument(parser)
    parser.add_argument(
        "--format", choices=("yaml", "json", "space"), default="yaml",
        help="output format; space: a search space that retrains the best trial (python -m hpo run --space) (default: %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the best trial(s); return the process exit code."""

    def body(args: argparse.Namespace, url: str) -> int:
        study = load_existing_study(open_existing_storage(url), url, args.study_name)
        if args.format == "space":
            print(best_space_yaml(study, best_space(study)), end="")
            return 0
        document = best_document(study)
        print(best_yaml(document) if args.format == "yaml" else json.dumps(document, indent=2), end="" if args.format == "yaml" else "\n")
        return 0

    return run_storage_command(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    sys.exit(exit_code_of(main))
