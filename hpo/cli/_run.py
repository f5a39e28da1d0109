"""``python -m hpo.run``: run (or resume, or extend) a precision-search study.

With no arguments it runs the demo study: the default search space on synthetic reviews,
stored in a SQLite file in the working directory.

examples:
  %(prog)s                                   # demo study, SQLite file in this directory
  %(prog)s --n-trials 20                     # extend the same study to 20 finished trials
  %(prog)s --storage postgresql://user:pass@db:5432/hpo --study-name sst2 \\
      --data train.tsv --text-column sentence --label-column label --space search_spaces/default.yaml
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from optuna.trial import FrozenTrial

from hpo._api import Run, RunHooks, open_run, run_study, run_verdict
from hpo._attrs import stored_verdict
from hpo._errors import UserError
from hpo.cli._parsing import Parser, at_least, between, command_prog
from hpo.cli._run_ray import add_ray_arguments, check_ray_flags, run_with_ray
from hpo.cli._training import run_training, start_training_command
from hpo.cli._worker_lines import WorkerErrors, budget_met, without_workers_flag
from hpo.reporting._progress import StudyProgress, best_so_far
from hpo.reporting._run_lines import finished_of_budget, run_summary, stop_checkpoint_lost, stopped_line, trial_line
from hpo.reporting._verdict import Verdict, verdict_table
from hpo.space._resolving import emulation_note
from hpo.storage._checkpoints import DEFAULT_ARTIFACT_DIR
from hpo.storage._storage import STORAGE_ENV, Heartbeat, mask_url
from hpo.study._budget import finished_count
from hpo.study._options import CACHE_ENV, DEFAULT_CACHE_DIR, DEFAULT_N_TRIALS, DEFAULT_STUDY_NAME, RunOptions
from hpo.study._outcomes import was_interrupted
from hpo.study._ray_workers import WorkerLostError
from hpo.study._run_checks import check_gpus
from hpo.study._study import TooManyFailuresError
from hpo.study._verdict import MAX_VERDICT_SEEDS, cut_short_line, nothing_left, verdict_after_budget, verdict_due
from hpo.study._warm_start import DEFAULT_WARM_START_TRIALS
from hpo.study._workers import (
    StopSignal,
    announce_once,
    exit_described,
    run_workers,
    second_signal_in,
    worker_index,
)
from trial_executor import DEVICES, HOLDOUTS, MIXED_PRECISION

PROG = command_prog("run")


_positive_int = at_least(1)
_positive_float = between(0.0, math.inf, "a positive number of seconds")
_fraction = between(0.0, 1.0, "a number between 0 and 1 (exclusive)")


def _gpu_list(text: str) -> list[str]:
    gpus = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in gpus):
        raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1,2, got {text!r}")
    return gpus


def _add_model_and_tracking(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default=None,
        help="train this model in every trial, in place of the space's model (a preset, a local save_pretrained directory)",
    )
    parser.add_argument(
        "--track", nargs="+", action="append", default=[], metavar="KIND",
        help="log each trial as a run: `--track mlflow` ($MLFLOW_TRACKING_URI, else ./mlflow.db) or `--track tensorboard DIR` "
             "(repeatable; needs pip install 'precision-hpo[tracking]')",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(PROG, __doc__)
    parser.add_argument(
        "--space", default=None,
        help="search-space YAML (default: search_spaces/finetune.yaml for a pretrained --model, else search_spaces/default.yaml)",
    )
    parser.add_argument(
        "--storage", default=None,
        help=f"database URL: sqlite:///file.db or postgresql://user:pass@host:5432/db (default: ${STORAGE_ENV}, else sqlite:///hpo-studies.db)",
    )
    parser.add_argument("--study-name", default=DEFAULT_STUDY_NAME, help="study to create or resume (default: %(default)s)")
    parser.add_argument(
        "--n-trials", type=_positive_int, default=DEFAULT_N_TRIALS,
        help="the study's total budget of finished (complete + pruned) trials, across all runs and workers (default: %(default)s)",
    )
    parser.add_argument("--timeout", type=_positive_float, default=None, help="stop starting new trials after this many seconds (a --verdict then waits for a rerun that finishes the budget)")
    parser.add_argument("--seed", type=int, default=None, help="seeds each trial (trial seed = seed + trial number) and, mixed with the trial's number, the sampler's "
                        "draws for it; the study keeps the seed it was made with (default: it, 0 for a new study)")
    parser.add_argument("--device", choices=DEVICES, default="auto", help="where trials train (default: %(default)s)")
    parser.add_argument(
        "--fix", action="append", default=[], metavar="NAME=VALUE",
        help="pin a searched parameter for this run (repeatable), e.g. --fix batch_size=16; the stored space is unchanged",
    )
    parser.add_argument(
        "--quiet", action="store_true",
        help="no progress bars: one plain line per finished trial (bars show only when stdout is a terminal)",
    )
    parser.add_argument(
        "--mixed-precision", choices=tuple(MIXED_PRECISION), default=None,
        help="accelerate's spelling of --fix fp_precision=fp32|fp16|bf16",
    )
    _add_model_and_tracking(parser)
    parser.add_argument(
        "--warm-start", default=None, metavar="STUDY",
        help="first run the best trials of this earlier study in the same storage (their params that fit the space; once per study)",
    )
    parser.add_argument(
        "--warm-start-trials", type=_positive_int, default=None,
        help=f"how many of --warm-start's best trials to run (default: {DEFAULT_WARM_START_TRIALS})",
    )
    parser.add_argument(
        "--verdict", type=at_least(2, MAX_VERDICT_SEEDS), default=None, metavar="SEEDS",
        help="once the budget is reached, re-train the best trial per precision with SEEDS paired seeds "
             "(python -m hpo verdict; default: the space's verdict: section, else none)",
    )
    _add_workers(parser)
    _add_data(parser)
    return parser


def _add_workers(parser: argparse.ArgumentParser) -> None:
    workers = parser.add_argument_group("workers and failures")
    workers.add_argument(
        "--workers", type=_positive_int, default=None,
        help="worker processes on this machine, all on the same study and budget, at most one per CPU (default: 1; with --ray, see --ray)",
    )
    workers.add_argument("--gpus", type=_gpu_list, default=None, help="GPU indices; worker i sees only GPU i mod N, e.g. 0,1,2,3")
    add_ray_arguments(workers)
    workers.add_argument(
        "--heartbeat-interval", type=_positive_int, default=Heartbeat.interval,
        help="seconds between a running trial's heartbeats (default: %(default)s)",
    )
    workers.add_argument(
        "--grace-period", type=_positive_int, default=Heartbeat.grace_period,
        help="seconds without a heartbeat before a trial counts as dead and is failed and retried (default: %(default)s)",
    )
    workers.add_argument(
        "--max-retry", type=at_least(0), default=Heartbeat.max_retry,
        help="times a dead or interrupted trial is retried (default: %(default)s)",
    )
    workers.add_argument(
        "--artifact-store", default=DEFAULT_ARTIFACT_DIR,
        help="directory for trial checkpoints, shared by every worker of the study (default: %(default)s)",
    )
    workers.add_argument("--keep-checkpoints", action="store_true", help="keep finished trials' checkpoints (default: removed)")


def _add_data(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data (default: the built-in synthetic reviews)")
    data.add_argument("--data", default=None, help="training data: a CSV, TSV or JSONL file, or a directory saved with datasets' save_to_disk")
    data.add_argument("--text-column", default="text", help="column holding the text (default: %(default)s)")
    data.add_argument("--text-pair-column", default=None, help="optional column with a second text (sentence pairs)")
    data.add_argument("--label-column", default="label", help="column holding the label: an integer or a name (classes), a number (regression) or a label set (multi-label; see the space's task:) (default: %(default)s)")
    held_out = data.add_mutually_exclusive_group()
    held_out.add_argument("--valid-data", default=None, help="validation file, same format and columns as --data")
    held_out.add_argument(
        "--valid-fraction", type=_fraction, default=0.1, help="seeded share of --data held out for validation (default: %(default)s)"
    )
    data.add_argument(
        "--holdout", choices=HOLDOUTS, default=None,
        help="how --valid-fraction rows are drawn: stratified (classes in their shares, each keeping a row for training; "
             "other tasks are drawn at random) or random (default: the study's own; stratified for a new study)",
    )
    data.add_argument(
        "--empty-text", choices=("drop", "fail"), default="drop", help="rows with empty text: drop them with a warning, or fail (default: %(default)s)"
    )
    data.add_argument(
        "--cache-dir", default=None,
        help=f"tokenized-data cache shared by trials and workers on this machine (default: ${CACHE_ENV}, else {DEFAULT_CACHE_DIR})",
    )


def _start_line(run: Run) -> str:
    prepared, options = run.prepared, run.options
    return (f"Study {options.study_name!r} in {mask_url(prepared.url)}: {finished_of_budget(finished_count(prepared.study), options.n_trials)} "
            f"trials already finished; training on {len(prepared.data.train_texts)} rows, "
            f"validating on {len(prepared.data.valid_texts)}.")


def _run_workers(run: Run, argv: Sequence[str], args: argparse.Namespace, stop: StopSignal) -> int:
    """``--workers N``: the workers run the trials and print their lines; this process shows the study bar,
    and says once what the run starts from and, when every worker is done, the summary and the verdict."""
    study, names = run.prepared.study, run.prepared.space.objective_names
    if stop.requested():  # a signal while the run was being prepared: no worker is started
        print(stopped_line(PROG, []), file=sys.stderr, flush=True)
        return stop.exit_code
    print(f"Starting {args.workers} workers on study {args.study_name!r}", flush=True)
    print(_start_line(run), flush=True)
    progress = StudyProgress(args.n_trials, finished_count(study), bars=StudyProgress.wants_bars(sys.stdout, args.quiet), quiet=args.quiet)

    def tick() -> None:
        # A display refresh must never stop the workers: the database may be restarting.
        with contextlib.suppress(Exception):
            progress.study_position(finished_count(study), best_so_far(study, names))

    errors = WorkerErrors(PROG, lambda index, line: progress.line(f"[worker {index}] {line}", stderr=True))

    with progress.showing():
        codes = run_workers(
            without_workers_flag(argv), args.workers, args.gpus,
            output=lambda index, line: progress.line(f"[worker {index}] {line}"), errors=errors, tick=tick,
        )
        tick()
    if stop.requested():
        return max(codes)  # each worker said what it interrupted
    for index, code in enumerate(codes):
        if code != 0 and not errors.said_why(index):  # a worker killed from outside (the OOM killer, SIGKILL) says nothing itself
            print(f"{PROG}: worker {index} exited with {exit_described(code)}", file=sys.stderr, flush=True)
    # The others (or its own retry) finished the budget: the study is whole, the fault was recovered.
    if max(codes) == 0 or budget_met(run, explained=all(code == 0 or errors.said_why(i) for i, code in enumerate(codes))):
        _print_summary_and_verdict(run)
        return 0
    return max(codes)


def _nothing_left(run: Run) -> int:
    """What a run of several workers says when its budget is met and no verdict is due, with none started: each would
    have imported torch and transformers (seconds apiece), found nothing to do and stopped."""
    if run.cluster is not None:
        run.cluster.shutdown()  # a cluster started here
    print(_start_line(run), flush=True)
    _print_summary_and_verdict(run)
    return 0


def _print_summary_and_verdict(run: Run) -> None:
    """The end of a run whose trials ran elsewhere (its workers), or not at all: the summary, then the stored verdict."""
    prepared = run.prepared
    print(run_summary(prepared.study, prepared.url, run.options.n_trials, prepared.space.objective_names), flush=True)
    _print_stored_verdict(run)


def _print_stored_verdict(run: Run) -> None:
    """The verdict table, read back from the study, when the run made one in its workers (processes or Ray actors);
    or why it made none (--timeout)."""
    study, space = run.prepared.study, run.prepared.space
    if (cut_short := cut_short_line(study, space, run.options)) is not None:
        print(cut_short, flush=True)
        return
    stored = stored_verdict(study) if verdict_after_budget(space, run.options) else None
    if stored:
        print("\n".join(["", *verdict_table(Verdict.from_dict(stored))]), flush=True)


def _run_here(run: Run, quiet: bool, stop: StopSignal) -> int:
    """Run trials in this process until the budget, a timeout or a signal; print the summary.

    A worker of ``--workers N`` prints its trials' lines and its stop line only: the command that
    started it says the rest once."""
    prepared, options = run.prepared, run.options
    study, names, url = prepared.study, prepared.space.objective_names, prepared.url
    worker = worker_index()
    if stop.requested():  # a signal while the run was being prepared: no trial is started
        print(stopped_line(PROG, []), file=sys.stderr, flush=True)
        return stop.exit_code
    if worker is None:
        print(_start_line(run), flush=True)
    # Workers of --workers N share one terminal: bars from several processes would tear each other.
    bars = StudyProgress.wants_bars(sys.stdout, quiet) and worker is None
    seen = [finished_count(study)]  # the study's finished trials, as last counted: the budget may be met when a signal comes
    progress = StudyProgress(options.n_trials, seen[0], bars=bars, quiet=quiet)

    interrupted: list[int] = []
    lost: dict[int, int] = {}

    def finished(trial: FrozenTrial, finished: int) -> None:
        seen[0] = finished
        progress.trial_finished(trial_line(trial, names), finished, best_so_far(study, names, ended_by=trial))
        if was_interrupted(trial):
            interrupted.append(trial.number)
            if (step := stop_checkpoint_lost(trial)) is not None:
                lost[trial.number] = step

    with progress.showing():
        hooks = RunHooks(on_trial_finished=finished, progress=progress.trial_step, stop_requested=stop.requested)
        try:
            run_study(prepared, options, hooks=hooks, trackers=run.trackers)
        except BaseException as err:  # a second signal: the trial it stopped is named, as after one (else run_training's line)
            if not (second_signal_in(err) and interrupted):
                raise
    if stop.requested():
        # The budget met and no verdict to make after it: a rerun would find nothing to do.
        met = options.n_trials if seen[0] >= options.n_trials and not verdict_after_budget(prepared.space, options) else None
        print(stopped_line(PROG, interrupted, lost, met), file=sys.stderr, flush=True)
        return stop.exit_code
    if worker is None:
        print(run_summary(study, url, options.n_trials, names), flush=True)
        if (cut_short := cut_short_line(study, prepared.space, options)) is not None:
            print(cut_short, flush=True)
    wanted = verdict_due(study, prepared.space, options)
    if wanted is not None:
        _verdict_after_budget(run, stop, worker, *wanted)
    return 0


def _verdict_after_budget(run: Run, stop: StopSignal, worker: int | None, seeds: int, precisions: list[str]) -> None:
    """The verdict trials, after (and not counted against) the budget.

    The workers of ``--workers N`` share the verdict trials; the first announces their cost, and
    the command that started them prints the table."""
    prepared, options = run.prepared, run.options
    names = prepared.space.objective_names
    verdict = run_verdict(
        prepared, options, seeds=seeds, precisions=precisions,
        hooks=RunHooks(on_trial_finished=lambda trial, _: print(trial_line(trial, names), flush=True), stop_requested=stop.requested),
        announce=announce_once,
    )
    if worker is None and not stop.requested():
        print("\n".join(["", *verdict_table(verdict)]), flush=True)


def _emulation_note(run: Run) -> str | None:
    """What this CPU emulates of the precisions the run trains: its trials' and those its verdict re-trains after the budget."""
    verdict = verdict_after_budget(run.prepared.space, run.options)
    return emulation_note(run.prepared.space, run.options.device, verdict=verdict[1] if verdict else ())


def options_of(args: argparse.Namespace) -> RunOptions:
    """The run's options from its flags, checked (:class:`RunOptions`); ``--mixed-precision`` joins ``--fix``."""
    fix = args.fix + ([f"fp_precision={MIXED_PRECISION[args.mixed_precision]}"] if args.mixed_precision else [])
    given = {name: getattr(args, name) for name in RunOptions.model_fields if name in vars(args)}
    if args.warm_start_trials is None:
        del given["warm_start_trials"]  # RunOptions' default
    elif args.warm_start is None:
        raise UserError("--warm-start-trials says how many of --warm-start's trials run: add --warm-start STUDY, or drop it")
    # --ray alone is "" (a cluster started here), as ray=True is for optimize().
    ray = False if args.ray is None else (args.ray or True)
    return RunOptions(**{**given, "fix": tuple(fix), "track": tuple(map(tuple, args.track)), "ray": ray})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the study; return the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, stop, url = start_training_command(build_parser(), argv)

    def body() -> int:
        # Everything that can be wrong with the input is checked before anything is written.
        check_ray_flags(args, url)
        options = options_of(args)
        gpu_warning = check_gpus(args.gpus, args.device)
        if gpu_warning and worker_index() is None:  # the parent says it once, not each worker
            print(f"{PROG}: warning: {gpu_warning}", file=sys.stderr, flush=True)
        # Workers of --workers N re-read the same flags: the parent alone says which space it took.
        announce = None if worker_index() is not None else print
        run = open_run(args.space and Path(args.space), args.data, options, announce=announce)
        study, names = run.prepared.study, run.prepared.space.objective_names
        if (run.cluster is not None or (args.workers or 1) > 1) and nothing_left(study, run.prepared.space, options):
            return _nothing_left(run)
        if announce is not None and run.cluster is None and (note := _emulation_note(run)):
            print(f"{PROG}: note: {note}", file=sys.stderr, flush=True)
        if run.cluster is not None:
            print(_start_line(run), flush=True)  # where a resumed study starts, as every run says
            code = run_with_ray(
                run, quiet=args.quiet, stop=stop, prog=PROG,
                line=lambda trial: trial_line(trial, names), summary=lambda: run_summary(study, url, options.n_trials, names),
            )
            if code == 0:
                _print_stored_verdict(run)
            return code
        if (args.workers or 1) > 1:
            return _run_workers(run, argv, args, stop)
        return _run_here(run, args.quiet, stop)

    # A second Ctrl-C stops at once: Optuna marks the running trial FAIL (where the storage can be reached).
    return run_training(PROG, url, body, stop, failures=(TooManyFailuresError, WorkerLostError), resume="the study")


if __name__ == "__main__":
    sys.exit(main())
