"""The Python API: :func:`optimize` runs a study to its budget in one call, :func:`load` opens one.

``python -m hpo run`` is a thin layer over the same steps: both build one :class:`RunOptions`,
open the run with :func:`open_run` (every input checked, then the study) and run it with
:func:`run_study` or :func:`run_on_ray`; the command adds signals, progress bars and worker processes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from hpo._attrs import stored_data_source, stored_space
from hpo.reporting._dashboard_view import name_objectives, note_skipped
from hpo.reporting._tracking import Tracker, Tracking, make_trackers
from hpo.reporting._verdict import Verdict, build_verdict, store_verdict
from hpo.reporting._verdict_cost import verdict_cost_line
from hpo.space._resolving import SpaceLike, check_models, check_precisions, choose_space, resolve_space
from hpo.space._space import DEFAULT_SPACE, SearchSpace
from hpo.storage._best_model import keep_if_best, keeping_best_model
from hpo.storage._checkpoints import DEFAULT_ARTIFACT_DIR, artifact_store
from hpo.storage._inspect import load_existing_study, open_existing_storage
from hpo.storage._storage import GRPC_SCHEME, Heartbeat, check_storage_url, create_storage, resolve_storage_url
from hpo.study import open_study, run_to_budget
from hpo.study._data import DataLike, data_source_of, its_own_holdout, on_its_own_holdout, resolve_data, stored_data
from hpo.study._liveness import checkpoint_sweep, fail_trials_of_killed_actors
from hpo.study._options import DEFAULT_N_TRIALS, DEFAULT_STUDY_NAME, RunHooks, RunOptions, Track
from hpo.study._ray_cluster import RayCluster, RayRun, plan
from hpo.study._ray_workers import TrialWatcher, connect, start_workers, wait_for_workers
from hpo.study._resuming import existing_space
from hpo.study._verdict import (
    DEFAULT_VERDICT_SEEDS,
    check_verdict_arguments,
    check_verdict_runs_here,
    enqueue_verdict,
    for_the_budget,
    plan_verdict,
    run_verdict_trials,
    verdict_after_budget,
    verdict_due,
)
from hpo.study._warm_start import DEFAULT_WARM_START_TRIALS, load_warm_start_source, warm_start_configurations
from hpo.study._workers import announce_once, worker_index
from trial_executor import StepProgress, TextClassificationData


@dataclass(frozen=True)
class PreparedStudy:
    """A study opened on validated inputs, ready to run."""

    study: optuna.Study
    space: SearchSpace
    data: TextClassificationData
    url: str


def prepare_study(
    space: SearchSpace, data: TextClassificationData, options: RunOptions, data_source: dict[str, Any] | None = None, *, search: bool = True,
) -> PreparedStudy:
    """Create or resume ``options.study_name`` in ``options.url`` on validated inputs (``data_source``, ``search``: :func:`open_study`).

    ``options.warm_start``: an earlier study in the same storage whose ``warm_start_trials`` best
    trials are enqueued (see :mod:`hpo.study._warm_start`); checked before anything is written. Given no ``--holdout``,
    a study whose hold-out was drawn another way is opened on its file held out that way (:func:`on_its_own_holdout`).
    """
    space.check_task(data.task)
    url = options.url
    earlier = None if options.warm_start is None else load_warm_start_source(url, options.warm_start, options.study_name)
    # Heartbeats live in the RDB storage: a worker on the database directly (or the proxy host) sweeps them.
    heartbeat = None if url.lower().startswith(GRPC_SCHEME) else options.heartbeat
    # create_storage checks the URL and the connection before creating tables.
    # A worker of --workers N: its parent reached the database, so a refused connection is a restart to wait out.
    opened = create_storage(url, heartbeat=heartbeat, wait_for_server=worker_index() is not None)
    known_good = [] if earlier is None else warm_start_configurations(space, earlier, options.warm_start_trials)

    def open_on(data: TextClassificationData, source: dict[str, Any] | None) -> optuna.Study:
        return open_study(opened, options.study_name, space, data, options.seed, known_good, source, search=search, device=options.device)

    study, data = on_its_own_holdout(open_on, data, data_source, options.holdout, space.task)
    name_objectives(study, space.objective_names)
    return PreparedStudy(study, space, data, url)


@dataclass
class Run:
    """A run opened by :func:`open_run`: its study, its trackers, and the Ray cluster its workers use (if any)."""

    prepared: PreparedStudy
    options: RunOptions
    trackers: list[Tracker]
    cluster: RayCluster | None = None
    placement: RayRun | None = None


def open_run(space: SpaceLike | None, data: DataLike, options: RunOptions, *, announce: Callable[[str], None] | None = print) -> Run:
    """The steps ``optimize`` and ``python -m hpo run`` share up to a study ready to run; nothing is written until the last.

    Reads the space (``options.model``, ``fix`` applied) and data; checks the storage URL, then the models
    (they import transformers); sets up the trackers and Ray cluster (``options.ray``); then ``announce``
    gets the line saying which space a run without one took, and the study opens. A cluster started
    here is shut down if opening fails; otherwise by :func:`run_prepared` or the caller.
    """
    own = existing_space(options.url, options.study_name) if space is None else None  # --model, if given, applied to it
    resolved = resolve_space(own or space, fix=options.fix, model=options.model, announce=None)
    worker = worker_index() is not None  # a worker of --workers N: its parent checked the same flags, and said its warnings
    loaded = resolve_data(data, task=resolved.task, warn=not worker, **options.data_options())
    verdict = verdict_after_budget(resolved, options)  # an impossible verdict is refused before the study trains, not after
    check_storage_url(options.url, wait_for_server=worker)
    if not worker:
        check_models(resolved, loaded.num_labels)
        check_precisions(resolved, options.device if options.ray is False else None)  # Ray's workers: their own devices
        if verdict is not None and options.ray is False:
            check_verdict_runs_here(verdict[1], options.device)
    trackers = make_trackers(options.track, options.study_name, resolved.objective_names)
    cluster = connect(None if options.ray is True else options.ray, options.url) if options.ray is not False else None
    if space is None and announce is not None:  # once the checks pass: a bad --model gets its one line, no claim about it first
        announce(f"Search space: the one study {options.study_name!r} was made with (no --space given)" if own else choose_space(options.model).line())
    try:
        placement = plan(cluster, options.workers, options.gpus_per_trial) if cluster else None
        prepared = prepare_study(resolved, loaded, options, data_source_of(data, options.data_options(), loaded.task))
        return Run(prepared, options, trackers, cluster, placement)
    except BaseException:
        if cluster is not None:
            cluster.shutdown()
        raise


def quiet_transformers() -> None:
    """transformers' own bars ("Loading weights") and info logging would write over the study's bars."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run_study(prepared: PreparedStudy, options: RunOptions, *, hooks: RunHooks | None = None, trackers: Sequence[Tracker] = ()) -> None:
    """Run ``prepared`` until the study has ``options.n_trials`` finished trials (see :func:`hpo.run_to_budget`).

    ``trackers`` (from :func:`hpo.reporting._tracking.make_trackers`) get one run per trial.
    """
    from hpo.study._objective import make_objective

    hooks = hooks or RunHooks()
    quiet_transformers()
    sweep = checkpoint_sweep(prepared.study, options.max_retry, keep=options.keep_checkpoints)
    store = artifact_store(options.artifact_store, sweep) if options.artifact_store else None
    tracking = Tracking(trackers)

    def progress(number: int, update: StepProgress) -> None:
        tracking.step(number, update)
        if hooks.progress is not None:
            hooks.progress(number, update)

    objective = make_objective(
        prepared.space, prepared.data, options, checkpoints=store, stop_requested=hooks.stop_requested, progress=progress,
        on_evaluation=tracking.evaluation,
    )
    study = for_the_budget(prepared.study, prepared.space.fixes)  # waiting verdict trials are the verdict workers' to claim

    def tracked(trial: optuna.Trial) -> float | tuple[float, ...]:
        tracking.start(trial)
        return objective(trial)

    def finished(trial: FrozenTrial, count: int) -> None:
        tracking.finish(trial)
        if store is not None:
            keep_if_best(study, trial, store)
        note_skipped(study, trial)
        if hooks.on_trial_finished is not None:
            hooks.on_trial_finished(trial, count)

    with keeping_best_model(study) if store is not None else contextlib.nullcontext(), warnings.catch_warnings():
        # Optuna's heartbeat sweep is "experimental" since 2.9: not the user's concern in a notebook.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        run_to_budget(
            study, tracked if trackers else objective, options.n_trials, timeout=options.timeout, on_trial_finished=finished,
            on_told=objective.told, stop_requested=hooks.stop_requested, max_retry=options.max_retry,
        )


@dataclass(frozen=True)
class WorkerJob:
    """What a worker on any machine needs to run its share of a study: sent (pickled) to each Ray worker.

    ``options.storage`` is the study's URL as the driver resolved it (see :func:`job_of`).
    """

    space: SearchSpace
    data: TextClassificationData
    options: RunOptions


def job_of(run: Run) -> WorkerJob:
    """What every Ray worker of ``run`` runs: the same study, options and budget as a ``--workers`` process."""
    prepared = run.prepared
    # The URL the driver opened: $HPO_STORAGE on another machine may say something else.
    return WorkerJob(prepared.space, prepared.data, run.options.model_copy(update={"storage": prepared.url}))


def run_job(job: WorkerJob, stop_requested: Callable[[], bool]) -> None:
    """One worker's path, as a ``--workers`` process runs it: open the study, run trials until the budget or a stop,
    then its share of the verdict trials (when the run makes a verdict; worker 0 announces their cost)."""
    prepared = prepare_study(job.space, job.data, job.options)
    hooks = RunHooks(stop_requested=stop_requested)
    trackers = make_trackers(job.options.track, job.options.study_name, job.space.objective_names)
    run_study_then_verdict(prepared, job.options, hooks, trackers)


def run_study_then_verdict(prepared: PreparedStudy, options: RunOptions, hooks: RunHooks, trackers: Sequence[Tracker]) -> Verdict | None:
    """:func:`run_study`, then, unless stopped, the verdict the run asks for (:func:`verdict_due`): it, or ``None``."""
    run_study(prepared, options, hooks=hooks, trackers=trackers)
    wanted = verdict_due(prepared.study, prepared.space, options)
    if wanted is None or (hooks.stop_requested is not None and hooks.stop_requested()):
        return None
    seeds, precisions = wanted
    return run_verdict(prepared, options, seeds=seeds, precisions=precisions, hooks=hooks, announce=announce_once)


def run_on_ray(
    run: Run, *, stop_requested: Callable[[], bool] = lambda: False,
    on_trial_finished: Callable[[FrozenTrial, int], None] | None = None, tick: Callable[[], None] | None = None,
) -> None:
    """Run ``run`` in ``run.placement.workers`` Ray actors until the study's budget; this process runs no trial.

    ``on_trial_finished(trial, finished)`` is called here, in the driver, for each trial a worker ended.
    The cluster is shut down at the end (if it was started here).
    """
    assert run.cluster is not None and run.placement is not None, "open_run(options with ray) connects the cluster"
    cluster, study = run.cluster, run.prepared.study
    try:
        driver = os.urandom(16).hex()  # names this run's actors in their trials: the ones it fails if it kills them
        actors = start_workers(cluster, run.placement, driver)
        watcher = TrialWatcher(study)

        def poll() -> None:
            for trial, finished in watcher.new():
                if on_trial_finished is not None:
                    on_trial_finished(trial, finished)
            if tick is not None:
                tick()

        wait_for_workers(cluster, actors, functools.partial(run_job, job_of(run)), stop_requested=stop_requested, tick=poll,
                         on_killed=lambda: fail_trials_of_killed_actors(study, driver, run.options.max_retry))
        poll()
    finally:
        cluster.shutdown()


def run_prepared(run: Run, hooks: RunHooks | None = None) -> None:
    """Run an opened ``run`` to its budget, then its verdict (if it makes one): in this process, or in Ray actors."""
    hooks = hooks or RunHooks()
    if run.cluster is None:
        run_study_then_verdict(run.prepared, run.options, hooks, run.trackers)
        return
    run_on_ray(run, stop_requested=hooks.stop_requested or (lambda: False), on_trial_finished=hooks.on_trial_finished)


def optimize(
    space: SpaceLike | None = None,
    data: DataLike = None,
    *,
    storage: str | None = None,
    study_name: str = DEFAULT_STUDY_NAME,
    n_trials: int = DEFAULT_N_TRIALS,
    timeout: float | None = None,
    seed: int | None = None,
    device: str = "auto",
    model: str | None = None,
    fix: Sequence[str] = (),
    text_column: str = "text", label_column: str = "label", text_pair_column: str | None = None,
    valid_data: str | Path | None = None,
    valid_fraction: float = 0.1,
    holdout: str | None = None,
    empty_text: str = "drop",
    cache_dir: str | None = None,
    artifact_store: str | None = DEFAULT_ARTIFACT_DIR,
    keep_checkpoints: bool = False,
    max_retry: int = Heartbeat.max_retry,
    track: Sequence[Track | Sequence[str]] = (),
    on_trial_finished: Callable[[FrozenTrial, int], None] | None = None,
    warm_start: str | None = None,
    warm_start_trials: int = DEFAULT_WARM_START_TRIALS,
    ray: bool | str = False,
    workers: int | None = None,
    gpus_per_trial: float | None = None,
    verdict: int | None = None,
) -> optuna.Study:
    """Run (or resume, or extend) a precision-search study to ``n_trials`` finished trials; return it.

    The keyword arguments are ``python -m hpo run``'s flags (the fields of :class:`RunOptions`). ``space``: a YAML path, a mapping (the
    YAML's content) or a :class:`hpo.SearchSpace`; ``None``: an existing study's own (``model``, if given, applied to it), else the one ``model`` takes (:func:`hpo.space._resolving.choose_space`). ``data``: a CSV/TSV/JSONL file or a
    ``save_to_disk`` directory (read with the data arguments), a :class:`trial_executor.TextClassificationData`, or ``None``: the demo reviews.
    ``storage``: a database URL (default ``$HPO_STORAGE``, else ``sqlite:///hpo-studies.db``).
    ``model`` fixes the model in place of the space's; ``fix`` pins searched params
    (``["batch_size=16"]``). ``track``: experiment trackers, e.g. ``["mlflow"]`` or
    ``[("tensorboard", "runs")]`` (one run per trial; the optional ``tracking`` extra).
    ``on_trial_finished(trial, finished)`` gets each ended trial. ``warm_start``: an earlier study in
    the same storage; its ``warm_start_trials`` best trials' params that fit the space run first (once).
    ``artifact_store=None``: no checkpoints and no kept best model. ``ray`` (the ``ray`` extra): ``workers``
    Ray actors run the trials, each reserving ``gpus_per_trial`` GPUs; ``True`` starts a local cluster, else
    its address (``"auto"``, ``"host:port"``, ``"ray://..."``). ``verdict``: seeds of the :func:`verdict` made once the
    budget is reached (as the space's ``verdict:``; its cost printed first, the verdict stored on the study). Bad input raises :class:`hpo.UserError` (or
    :class:`trial_executor.DataError`) before anything is written. Rerunning the same call resumes the study.
    """
    options = RunOptions(
        storage=storage, study_name=study_name, n_trials=n_trials, timeout=timeout, seed=seed, device=device, model=model,
        fix=fix, text_column=text_column, label_column=label_column, text_pair_column=text_pair_column,
        valid_data=valid_data, valid_fraction=valid_fraction, holdout=holdout, empty_text=empty_text, cache_dir=cache_dir,
        artifact_store=artifact_store, keep_checkpoints=keep_checkpoints, max_retry=max_retry, track=track, warm_start=warm_start,
        warm_start_trials=warm_start_trials, ray=ray, workers=workers, gpus_per_trial=gpus_per_trial, verdict=verdict,
    )
    options.check_python_arguments()
    hooks = RunHooks(on_trial_finished=on_trial_finished)  # checked here: a hook that cannot be called is refused before the study is written
    run = open_run(space, data, options)
    run_prepared(run, hooks)
    return run.prepared.study


def load(study_name: str | None = DEFAULT_STUDY_NAME, storage: str | None = None) -> optuna.Study:
    """An existing study, ``None`` for the storage's only one (``storage`` as in :func:`optimize`); :class:`hpo.UserError` if none."""
    url = resolve_storage_url(storage)
    return load_existing_study(open_existing_storage(url), url, study_name)


def run_verdict(
    prepared: PreparedStudy, options: RunOptions, *, seeds: int = DEFAULT_VERDICT_SEEDS, precisions: Sequence[str] | None = None,
    trial: int | None = None, hooks: RunHooks | None = None, announce: Callable[[str], None] = print,
) -> Verdict:
    """Re-train the best (or ``trial``'s) configuration per supported precision and paired seed; store and return the verdict.

    The cost is announced before any trial starts. Verdict trials are enqueued once per study,
    shared with every worker running this at the same time, and resumed by a rerun. ``options.seed``
    is the study's ``--seed`` (verdict trials themselves train with the verdict's seeds).
    """
    from hpo.study._objective import make_objective
    from trial_executor import precision_support, resolve_device
    from trial_executor.precision import emulated_precisions

    hooks = hooks or RunHooks()
    quiet_transformers()
    study = prepared.study
    device = resolve_device(options.device)
    plan = plan_verdict(study, precision_support(device), seeds=seeds, precisions=precisions, trial_number=trial, device_type=device.type)
    # A rerun announces what is left: a (precision, seed) finishes once (only a failed attempt is retried).
    announce(verdict_cost_line(study, plan, emulated_precisions(device)))
    enqueue_verdict(study, study._storage, plan)
    objective = make_objective(prepared.space, prepared.data, options, stop_requested=hooks.stop_requested, progress=hooks.progress,
                               checkpoints=artifact_store(options.artifact_store) if options.artifact_store else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        run_verdict_trials(study, objective, plan, max_retry=options.max_retry, on_trial_finished=hooks.on_trial_finished,
                           on_told=objective.told, stop_requested=hooks.stop_requested)
    verdict = build_verdict(study, plan.source.number, plan.seeds, plan.precisions, plan.unsupported)
    if not (hooks.stop_requested and hooks.stop_requested()):  # stopped, it is partial: the stored one (whole, or none) stays
        store_verdict(study, verdict)
    return verdict


def open_existing(space: SpaceLike | None, data: DataLike, options: RunOptions) -> PreparedStudy:
    """An existing study opened on its own space and data (unless ``space`` or ``data`` is given), for its verdict.
    Without ``data``, the data flags the study stored (a file's absolute path and its columns) are read again."""
    existing = load(options.study_name, options.url)
    resolved = resolve_space(space if space is not None else stored_space(existing) or DEFAULT_SPACE)
    data_options = options.data_options()
    if data is None:
        data, data_options = stored_data(stored_data_source(existing), data_options)
    elif data_options["holdout"] is None and not isinstance(data, TextClassificationData):  # a copy of its file, held out as it was
        data_options["holdout"] = its_own_holdout(stored_data_source(existing))
    loaded = resolve_data(data, task=resolved.task, **data_options)
    check_models(resolved, loaded.num_labels)
    return prepare_study(resolved, loaded, options, search=False)  # a verdict enqueues no search trial


def verdict(
    study_name: str = DEFAULT_STUDY_NAME, data: DataLike = None, *, storage: str | None = None,
    seeds: int = DEFAULT_VERDICT_SEEDS, precisions: Sequence[str] | None = None, trial: int | None = None,
    space: SpaceLike | None = None, seed: int | None = None, device: str = "auto", cache_dir: str | None = None,
    artifact_store: str | None = DEFAULT_ARTIFACT_DIR, max_retry: int = Heartbeat.max_retry, **data_options: Any,
) -> Verdict:
    """The precision verdict of an existing study (``python -m hpo verdict``): see :func:`run_verdict`.

    ``data`` and ``data_options`` (:func:`resolve_data`'s arguments) default to the file and flags the study last ran
    with, ``space`` to its own (see :func:`open_existing`); ``seed`` is the study's ``--seed``.
    """
    check_verdict_arguments(seeds, precisions, trial)
    options = RunOptions(
        storage=resolve_storage_url(storage), study_name=study_name, seed=seed, device=device, cache_dir=cache_dir,
        artifact_store=artifact_store, max_retry=max_retry, **data_options,
    )
    return run_verdict(open_existing(space, data, options), options, seeds=seeds, precisions=precisions, trial=trial)
