"""What every command that trains does around its body: quiet libraries, SIGINT/SIGTERM honoured, the end said in one line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence

import optuna

from hpo._errors import UserError
from hpo.cli._parsing import run_guarded
from hpo.storage._backoff import waiting_ends_on
from hpo.storage._storage import resolve_storage_url
from hpo.study._outcomes import quiet_trial_failures
from hpo.study._workers import StopSignal, second_signal_in, watch_launcher
from trial_executor import DataError


def _quiet_libraries() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    quiet_trial_failures()


def start_training_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[argparse.Namespace, StopSignal, str]:
    """What a command that trains does first: parse ``argv``, quiet the libraries, catch SIGINT/SIGTERM, resolve --storage."""
    args = parser.parse_args(argv)
    _quiet_libraries()
    stop = StopSignal()
    stop.install()
    watch_launcher()  # a worker of --workers N stops once its launcher is gone
    return args, stop, resolve_storage_url(args.storage)


def run_training(
    prog: str, url: str, body: Callable[[], int], stop: StopSignal, *, failures: tuple[type[Exception], ...], resume: str,
) -> int:
    """:func:`run_guarded` for a command that trains, with ``stop`` (its SIGINT/SIGTERM) honoured everywhere.

    Once a stop is requested, a storage outage is not waited out (``waiting_ends_on``). A second
    Ctrl-C ends the command at once with one line, "rerun ... to resume ``resume``", also where Optuna
    masked its KeyboardInterrupt with an error of its own (an UnboundLocalError in ``_run_trial``).
    """
    try:
        with waiting_ends_on(stop.requested):
            return run_guarded(prog, url, body, user_errors=(UserError, DataError), failures=failures)
    except BaseException as err:
        if not second_signal_in(err):
            raise
        print(f"{prog}: interrupted; rerun the same command to resume {resume}", file=sys.stderr)
        return stop.exit_code or 130
