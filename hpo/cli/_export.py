"""``python -m hpo.export``: every trial of a study as CSV or JSON, one flat row per trial.

Columns: ``number``, ``state``, start and completion times, ``duration_s``,
``values.<objective>``, ``params.<name>``, then every user attribute with nested dicts as
dotted keys (``hardware.device_name``, ``metrics.accuracy``, ``config.batch_size``). In CSV,
lists are JSON text and missing values are empty. ``--format`` defaults to ``--out``'s extension
(``.csv``, ``.json``) and must agree with it. ``--verdict``: the study's precision verdict
instead, one row per precision (``python -m hpo verdict`` computes it).

examples:
  %(prog)s --study-name precision-demo --out trials.csv             # CSV: the extension says it
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
FORMATS = ("csv", "json")


def export_format(given: str | None, out: str | None) -> str:
    """The format to write: ``--format``, else ``--out``'s extension; one that contradicts the extension is refused."""
    extension = Path(out).suffix.lower().lstrip(".") if out else ""
    if given is None:
        if extension in FORMATS:
            return extension
        where = f"--out {out} has no .csv or .json extension" if out else "standard output has no file extension"
        raise UserError(f"--format is needed: {where}; pass --format csv or --format json")
    if extension in FORMATS and extension != given:
        raise UserError(f"--format {given} contradicts --out {out} (a .{extension} file); name the file .{given}, or drop --format")
    return given


def build_parser() -> Parser:
    parser = Parser(PROG, __doc__)
    parser.add_argument("--study-name", default=None, help="the study to export (default: the storage's only study)")
    parser.add_argument("--format", choices=FORMATS, default=None, help="csv or json (default: --out's extension, .csv or .json)")
    parser.add_argument("--out", default=None, help="file to write (default: standard output)")
    parser.add_argument("--verdict", action="store_true", help="export the study's precision verdict, one row per precision")
    add_storage_argument(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Write the export; return the process exit code."""

    def body(args: argparse.Namespace, url: str) -> int:
        form = export_format(args.format, args.out)  # before the study is read: CSV never lands in a .json file
        study = load_existing_study(open_existing_storage(url), url, args.study_name)
        rows = verdict_rows(study) if args.verdict else export_rows(study)
        text = rows_csv(rows) if form == "csv" else rows_json(rows)
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
