"""``python -m hpo.run --ray [ADDRESS]``: the study's workers as Ray actors; this process shows their progress."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable

from optuna.trial import FrozenTrial

from hpo._api import Run, run_on_ray
from hpo._errors import UserError
from hpo.reporting._progress import StudyProgress, best_so_far
from hpo.reporting._run_lines import stopped_line
from hpo.study._budget import finished_count
from hpo.study._outcomes import was_interrupted
from hpo.study._ray_cluster import check_gpus_per_trial
from hpo.study._ray_workers import check_reachable, refuse_shared_sqlite, require_ray
from hpo.study._workers import StopSignal

LOCAL = ""  # `--ray` with no address: start a Ray cluster on this machine


def _gpus(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GPUs such as 0.25, 1 or 2, got {text!r}") from None
    try:
        check_gpus_per_trial(value)
    except UserError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--gpus-per-trial ")) from None
    return value


def add_ray_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--ray", nargs="?", const=LOCAL, default=None, metavar="ADDRESS",
        help="run the workers as Ray actors: on the cluster at ADDRESS (auto, host:port, ray://host:port), or on one started "
             "here; --workers defaults to one per GPU share (else per CPU) of the cluster (needs pip install 'precision-hpo[ray]')",
    )
    group.add_argument(
        "--gpus-per-trial", type=_gpus, default=None, metavar="F",
        help="with --ray: GPUs each trial reserves through Ray, a fraction (0.25: four trials share a GPU) or whole GPUs "
             "(default: 1 on a cluster with GPUs, else 0)",
    )


def check_ray_flags(args: argparse.Namespace, storage_url: str) -> None:
    if args.ray is None and args.gpus_per_trial is not None:
        raise UserError("--gpus-per-trial places trials through Ray: add --ray (without Ray, --workers N --gpus 0,1 pins workers to GPUs)")
    if args.ray is not None and args.gpus:
        raise UserError("--gpus picks GPUs on this machine; with --ray, Ray assigns them: use --gpus-per-trial")
    if args.ray is not None:
        # Before the space and data are read, and a wrong address before Ray's import (seconds): said at once.
        refuse_shared_sqlite(storage_url, args.ray, nodes=1)
        check_reachable(args.ray or None)
        require_ray()


def run_with_ray(
    run: Run, *, quiet: bool, stop: StopSignal, line: Callable[[FrozenTrial], str], summary: Callable[[], str], prog: str,
) -> int:
    """Run the workers on Ray until the budget or Ctrl-C; print each trial's ``line``, then the ``summary``."""
    cluster, placement = run.cluster, run.placement
    assert cluster is not None and placement is not None, "open_run(options with ray) connects the cluster"
    study, names = run.prepared.study, run.prepared.space.objective_names
    share = f", {placement.gpus_per_trial:g} GPU each" if placement.gpus_per_trial else ""
    print(f"Starting {placement.workers} Ray workers{share} on study {run.options.study_name!r} "
          f"({cluster.address}: {cluster.nodes} nodes, {cluster.cpus:g} CPUs, {cluster.gpus:g} GPUs)", flush=True)
    progress = StudyProgress(run.options.n_trials, finished_count(study), bars=StudyProgress.wants_bars(sys.stdout, quiet), quiet=quiet)

    interrupted: list[int] = []

    def finished(trial: FrozenTrial, count: int) -> None:
        progress.trial_finished(line(trial), count, best_so_far(study, names, ended_by=trial))
        if was_interrupted(trial):
            interrupted.append(trial.number)

    def tick() -> None:
        with contextlib.suppress(Exception):  # a display refresh never stops the workers: the database may be restarting
            progress.study_position(finished_count(study), best_so_far(study, names))

    with progress.showing():
        run_on_ray(run, stop_requested=stop.requested, on_trial_finished=finished, tick=tick)
    if stop.requested():
        print(stopped_line(prog, interrupted), file=sys.stderr, flush=True)
        return stop.exit_code
    print(summary(), flush=True)
    return 0
