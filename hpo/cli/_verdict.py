"""``python -m hpo.verdict``: for a study's best configuration, what each precision costs and buys.

Re-trains the best trial (or ``--trial N``) once per precision this machine supports and per
seed, the seeds paired across precisions, as verdict trials of the same study (not counted
against ``--n-trials``). Several processes running this on one study share the trials; a rerun
resumes them. Prints the table and one line of verdict per precision, stores the verdict on
the study (``report``, ``export --verdict`` and the dashboard's study note show it) and writes
``verdict.md`` and ``verdict.png`` into ``--out``. The space and the data default to the
study's own: without --data, the file (its absolute path) and data flags the study last ran
with are read again.

examples:
  %(prog)s --study-name precision-demo --seeds 3
  %(prog)s --study-name sst2 --data train.tsv --valid-data dev.tsv --text-column sentence --precisions fp32 bf16 --out reports/sst2
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from hpo._api import RunHooks, open_existing, run_verdict
from hpo._attrs import stored_data_source
from hpo._files import path_component
from hpo.cli._parsing import Parser, add_storage_argument, at_least, command_prog
from hpo.cli._run import _add_data
from hpo.cli._training import run_training, start_training_command
from hpo.reporting._run_lines import trial_line
from hpo.reporting._verdict import verdict_out, write_verdict
from hpo.storage._checkpoints import DEFAULT_ARTIFACT_DIR
from hpo.storage._inspect import load_existing_study, open_existing_storage
from hpo.storage._storage import Heartbeat
from hpo.study._data import data_flags
from hpo.study._options import RunOptions
from hpo.study._study import TooManyFailuresError
from hpo.study._verdict import DEFAULT_VERDICT_SEEDS, MAX_VERDICT_SEEDS
from hpo.study._workers import StopSignal
from trial_executor import DEVICES, PRECISIONS

PROG = command_prog("verdict")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(PROG, __doc__)
    parser.add_argument("--study-name", default=None, help="the study whose trial is re-trained (default: the storage's only study)")
    add_storage_argument(parser, "database URL the study lives in")
    parser.add_argument("--seeds", type=at_least(2, MAX_VERDICT_SEEDS), default=DEFAULT_VERDICT_SEEDS,
                        help=f"paired seeds per precision, 2 to {MAX_VERDICT_SEEDS} (default: %(default)s)")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=None, metavar="P",
                        help="precisions to compare, fp32 among them (default: those the study's space searches, else all; "
                             "unsupported ones are listed, not run)")
    parser.add_argument("--trial", type=at_least(0), default=None, help="re-train this trial (default: the best)")
    parser.add_argument("--space", default=None, help="search-space YAML (default: the one the study was made with)")
    parser.add_argument("--device", choices=DEVICES, default="auto", help="where trials train (default: %(default)s)")
    parser.add_argument("--out", default=None, help="directory for verdict.md and verdict.png (default: ./hpo-verdict-<study>)")
    parser.add_argument("--max-retry", type=at_least(0), default=Heartbeat.max_retry,
                        help="times a dead or interrupted trial is retried (default: %(default)s)")
    parser.add_argument("--heartbeat-interval", type=at_least(1), default=Heartbeat.interval,
                        help="seconds between a running trial's heartbeats (default: %(default)s)")
    parser.add_argument("--grace-period", type=at_least(1), default=Heartbeat.grace_period,
                        help="seconds without a heartbeat before a trial counts as dead (default: %(default)s)")
    parser.add_argument("--artifact-store", default=DEFAULT_ARTIFACT_DIR, help="checkpoint directory (default: %(default)s)")
    _add_data(parser)
    return parser


def _options(args: argparse.Namespace, url: str) -> RunOptions:
    given = {name: getattr(args, name) for name in RunOptions.model_fields if name in vars(args)}
    # As report, export and best: without --study-name, the storage's only study.
    name = args.study_name if args.study_name is not None else load_existing_study(open_existing_storage(url), url, None).study_name
    return RunOptions(**{**given, "storage": url, "study_name": name})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the verdict; return the process exit code."""
    args, stop, url = start_training_command(build_parser(), sys.argv[1:] if argv is None else argv)

    def body() -> int:
        options = _options(args, url)
        with verdict_out(Path(args.out or f"hpo-verdict-{path_component(options.study_name)}")) as out:
            return _verdict(args, options, out, stop)

    return run_training(PROG, url, body, stop, failures=(TooManyFailuresError,), resume="the verdict")


def _verdict(args: argparse.Namespace, options: RunOptions, out: Path, stop: StopSignal) -> int:
    """The verdict of ``options.study_name``, written into ``out``; the process exit code."""
    prepared = open_existing(args.space and Path(args.space), args.data, options)
    if args.data is None and (source := stored_data_source(prepared.study)) is not None:
        print(f"Data: {data_flags(source)} (the study's own; --data reads another copy)", flush=True)
    names = prepared.space.objective_names
    hooks = RunHooks(on_trial_finished=lambda t, _: print(trial_line(t, names), flush=True), stop_requested=stop.requested)
    verdict = run_verdict(
        prepared, options, seeds=args.seeds, precisions=args.precisions, trial=args.trial, hooks=hooks,
        announce=lambda line: print(line, flush=True),
    )
    if stop.requested():
        print(f"{PROG}: stopped by a signal; rerun the same command to resume the verdict", file=sys.stderr)
        return stop.exit_code
    print(write_verdict(verdict, out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
