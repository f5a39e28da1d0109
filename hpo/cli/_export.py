"""``python -m hpo.export``: every trial of a study as CSV or JSON, one flat row per trial.

Columns: ``number``, ``state``, start and completion times, ``duration_s``,
``values.<objective>``, ``params.<name>``, then every user attribute with nested dicts as
dotted keys (``hardware.device_name``, ``metrics.accuracy``, ``config.batch_size``). In CSV,
lists are JSON text and missing values are empty. ``--verdict``: the study's precision verdict
instead, one row per precision (``python -m hpo verdict`` computes it).

examples:
  %(prog)s --study-name precision-demo --format csv --out trials.csv
  %(prog)s --study-name sst2 --format json --storage postgresql://user:pass@db:5432/hpo > trials.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from hpo._errors import UserError
from hpo._files import write_whole
from hpo.cli._parsing import Parser, add_storage_argument, command_prog, exit_code_of, run_storage_command
from hpo.reporting._export import export_rows, rows_csv, rows_json
from hpo.reporting._verdict import verdict_rows
from hpo.storage._inspect import load_existing_study, open_existing_storage, sqlite_file_of

PROG = command_prog("export")


def build_parser() -> Parser:
    parser = Parser(PROG, __doc__)
    parser.add_argument("--study-name", default=None, help="the study to export (default: the storage's only study)")
    parser.add_argument("--format", choices=("csv", "json"), required=True, help="csv or json")
    parser.add_argument("--out", default=None, help="file to write (default: standard output)")
    parser.add_argument("--verdict", action="store_true", help="export the study's precision verdict, one row per precision")
    add_storage_argument(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Write the export; return the process exit code."""

    def body(args: argparse.Namespace, url: str) -> int:
        study = load_existing_study(open_existing_storage(url), url, args.study_name)
        rows = verdict_rows(study) if args.verdict else export_rows(study)
        text = rows_csv(rows) if args.format == "csv" else rows_json(rows)
        if args.out is None:
            sys.stdout.write(text)
            return 0
        database = sqlite_file_of(url)
        if database is not None and Path(args.out).resolve() == database.resolve():
            raise UserError(f"--out {args.out} is the study's own database (--storage); write the export to another file")
        write_whole(Path(args.out), text, "--out")
        print(f"Wrote {len(rows)} {'precisions' if args.verdict else 'trials'} of study {study.study_name!r} to {args.out}")
        return 0

    return run_storage_command(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    sys.exit(exit_code_of(main))
