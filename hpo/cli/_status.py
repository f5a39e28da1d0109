"""``python -m hpo.status``: the studies in a storage, their trials by state, the best so far, and who runs what.

Running trials show their worker (host and pid), how long they have run and the time since
their last heartbeat ("no heartbeat" when the workers run without heartbeats, e.g. through the
gRPC proxy).

examples:
  %(prog)s                                   # every study in $HPO_STORAGE (or sqlite:///hpo-studies.db)
  %(prog)s --storage postgresql://user:pass@db:5432/hpo --study-name sst2
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import optuna

from hpo.cli._parsing import Parser, add_storage_argument, command_prog, exit_code_of, run_storage_command
from hpo.reporting._status import status_lines, study_status
from hpo.storage._inspect import load_existing_study, open_existing_storage
from hpo.storage._storage import mask_url

PROG = command_prog("status")


def build_parser() -> Parser:
    parser = Parser(PROG, __doc__)
    add_storage_argument(parser)
    parser.add_argument("--study-name", default=None, help="show only this study (default: every study in the storage)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the status; return the process exit code."""

    def body(args: argparse.Namespace, url: str) -> int:
        storage = open_existing_storage(url)
        if args.study_name is not None:
            studies = [load_existing_study(storage, url, args.study_name)]
        else:
            names = sorted(optuna.get_all_study_names(storage))
            studies = [optuna.load_study(study_name=name, storage=storage) for name in names]
        lines = [f"{mask_url(url)}: {len(studies)} {'study' if len(studies) == 1 else 'studies'}"]
        for study in studies:
            lines += ["", *status_lines(study_status(storage, study))]
        print("\n".join(lines))
        return 0

    return run_storage_command(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    sys.exit(exit_code_of(main))
