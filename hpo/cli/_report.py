"""``python -m hpo.report``: what each precision did in a study, as Markdown and a plot.

Writes ``report.md`` and ``precision_tradeoff.png`` (the objective metric against training
samples/s, one colour per precision, the front circled) into ``--out`` and prints the tables.

examples:
  %(prog)s --study-name precision-demo                  # ./hpo-report-precision-demo/report.md
  %(prog)s --study-name sst2 --storage postgresql://user:pass@db:5432/hpo --out reports/sst2
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from hpo._attrs import stored_verdict
from hpo._errors import UserError
from hpo._files import path_component, write_whole
from hpo.cli._parsing import Parser, add_storage_argument, command_prog, exit_code_of, run_storage_command
from hpo.reporting._report import build_report, front_table, markdown, precision_table, summary_lines
from hpo.reporting._tradeoff_plot import plot_tradeoff
from hpo.reporting._verdict import VERDICT_PNG, Verdict, other_best, plot_verdict, verdict_markdown, verdict_table
from hpo.storage._inspect import load_existing_study, open_existing_storage
from hpo.storage._storage import mask_url

PROG = command_prog("report")
PLOT_NAME = "precision_tradeoff.png"
REPORT_NAME = "report.md"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(PROG, __doc__)
    parser.add_argument("--study-name", default=None, help="the study to report on (default: the storage's only study)")
    add_storage_argument(parser, "database URL the study lives in")
    parser.add_argument("--out", default=None, help="directory for report.md and the plot (default: ./hpo-report-<study>)")
    return parser



def main(argv: Sequence[str] | None = None) -> int:
    """Write the report; return the process exit code."""

    def body(args: argparse.Namespace, url: str) -> int:
        study = load_existing_study(open_existing_storage(url), url, args.study_name)
        out = Path(args.out or f"hpo-report-{path_component(study.study_name)}")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create --out directory {out}: {err.strerror}; pass a directory that can be made there") from None
        report = build_report(study, mask_url(url))
        stored = stored_verdict(study)
        verdict = Verdict.from_dict(stored) if stored else None  # the study's verdict (python -m hpo verdict), if any
        stale = other_best(study, verdict) if verdict else None  # the study's best is no longer the verdict's trial
        text = markdown(report, PLOT_NAME) + (f"\n{verdict_markdown(verdict, VERDICT_PNG)}" if verdict else "") + (f"\n{stale}\n" if stale else "")
        # The plots first: report.md, which shows them, is never left pointing at one that could not be written.
        plot_tradeoff(report, out / PLOT_NAME)
        if verdict:
            plot_verdict(verdict, out / VERDICT_PNG)
        write_whole(out / REPORT_NAME, text, "the report")
        print("\n".join([
            *summary_lines(report), "", *precision_table(report), "", f"{report.front_label}:", *front_table(report), "",
            *([f"Precision verdict of trial {verdict.source_trial}:", *verdict_table(verdict), *([stale] if stale else []), ""] if verdict else []),
            f"Wrote {out / REPORT_NAME} and {out / PLOT_NAME}" + (f" and {out / VERDICT_PNG}" if verdict else ""),
        ]))
        return 0

    return run_storage_command(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    sys.exit(exit_code_of(main))
