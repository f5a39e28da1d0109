"""``python -m hpo.report``: what each precision did in a study, as Markdown and a plot.

Writes ``report.md`` and ``precision_tradeoff.png`` (the objective metric against training
samples/s, one colour per precision, the front circled) into ``--out`` and prints the tables.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import optuna
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from hpo._errors import UserError
from hpo._report import build_report, front_table, markdown, plot_tradeoff, precision_table, summary_lines
from hpo._storage import STORAGE_ENV, create_storage, mask_secrets, mask_url, resolve_storage_url

PROG = "python -m hpo.report"
PLOT_NAME = "precision_tradeoff.png"
REPORT_NAME = "report.md"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            f"  {PROG} --study-name precision-demo                  # ./hpo-report-precision-demo/report.md\n"
            f"  {PROG} --study-name sst2 --storage postgresql://user:pass@db:5432/hpo --out reports/sst2"
        ),
    )
    parser.add_argument("--study-name", required=True, help="the study to report on")
    parser.add_argument(
        "--storage", default=None,
        help=f"database URL the study lives in (default: ${STORAGE_ENV}, else sqlite:///hpo-studies.db)",
    )
    parser.add_argument("--out", default=None, help="directory for report.md and the plot (default: ./hpo-report-<study>)")
    return parser


def _check_sqlite_file(url: str) -> None:
    # Reading must not leave an empty database behind, which opening a missing SQLite file would.
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return  # create_storage explains a malformed URL
    if parsed.drivername == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database).expanduser()
        if not path.is_file():
            raise UserError(f"no SQLite database at {path}; pass the --storage the study was run with")


def _load(url: str, study_name: str) -> optuna.Study:
    _check_sqlite_file(url)
    storage = create_storage(url)
    names = optuna.get_all_study_names(storage)
    if study_name not in names:
        found = ", ".join(sorted(names)) or "none"
        raise UserError(f"no study {study_name!r} in {mask_url(url)}; studies found: {found}")
    return optuna.load_study(study_name=study_name, storage=storage)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the report; return the process exit code."""
    args = build_parser().parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = resolve_storage_url(args.storage)
    try:
        study = _load(url, args.study_name)
        out = Path(args.out or f"hpo-report-{args.study_name}")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create --out directory {out}: {err.strerror}") from None
        report = build_report(study, mask_url(url))
        (out / REPORT_NAME).write_text(markdown(report, PLOT_NAME), encoding="utf-8")
        plot_tradeoff(report, out / PLOT_NAME)
        print("\n".join([
            *summary_lines(report), "", *precision_table(report), "", f"{report.front_label}:", *front_table(report), "",
            f"Wrote {out / REPORT_NAME} and {out / PLOT_NAME}",
        ]))
    except UserError as err:
        print(f"{PROG}: error: {mask_secrets(str(err), url)}", file=sys.stderr)
        return 2
    except SQLAlchemyError as err:
        first = str(err).strip().splitlines()[0]
        print(f"{PROG}: error: storage {mask_url(url)} failed: {mask_secrets(first, url)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
