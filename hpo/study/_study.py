"""Opening a study safely and running it to its global budget of finished trials."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import optuna
from optuna.storages._heartbeat import is_heartbeat_enabled
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import (
    BASELINE_ATTR,
    BUDGET_SLOT_ATTR,
    ENQUEUED_FROM_ATTR,
    FAIL_REASON_ATTR,
    SEED_ATTR,
    SKIP_DETAIL_ATTR,
    SKIP_REASON_ATTR,
    fail_reason_of,
    is_baseline,
    is_verdict_trial,
    skip_reason_of,
)
from hpo.space._space import SearchSpace
from hpo.space._trial_values import InvalidTrialError
from hpo.storage import set_user_attrs
from hpo.storage._backoff import retry_lost_connection
from hpo.storage._retry_policy import RetryByTrialPolicy
from hpo.study._budget import FINISHED, budget_of, budget_used, counts_toward_budget, finished_when, take_slot
from hpo.study._known_good import origins_of, space_entries
from hpo.study._liveness import fail_and_requeue, fail_dead_local_trials, lost_retries, releasable
from hpo.study._lock import study_lock
from hpo.study._outcomes import (
    INTERRUPTED,
    OVER_BUDGET_DETAIL,
    SKIP_DUPLICATE,
    SKIP_OVER_BUDGET,
    SKIP_UNSUPPORTED,
    never_ran,
    says_nothing_here,
    was_interrupted,
)
from hpo.study._resuming import check_resumable, study_attrs, study_seed
from hpo.study._workers import defer_second_signal, end_deferral, second_signal_in
from trial_executor import TextClassificationData, heap_frozen

MAX_CONSECUTIVE_FAILURES = 3
# How often a worker with no budget left to start checks whether the running trials of others finished or died.
ROOM_POLL_S = 1.0
# System attr of an over-budget hand-back's copy: the trial it copies, which it is no duplicate of.
HANDED_BACK_FROM = "handed_back_from"
# System attr of a known-good configuration queued again: the trial whose drawn precision this machine could not run.
REDRAW_OF = "redraw_of"
_logger = logging.getLogger(__name__)


class TooManyFailuresError(RuntimeError):
    """Trials keep failing; running more would only repeat the failure."""


def open_study(
    storage: optuna.storages.BaseStorage, study_name: str, space: SearchSpace, data: TextClassificationData, seed: int | None,
    known_good: Sequence[tuple[str, dict[str, Any]]] = (), data_source: dict[str, Any] | None = None, *, search: bool = True,
    device: str | None = None,
) -> optuna.Study:
    """Create the study, or resume it when the search space and data are the ones it was made with.

    ``known_good``: more ``(origin, params)`` to enqueue once (a warm start's), after the space's
    ``enqueue`` list and before the fp32 baseline. ``data_source``: the data flags to store
    (:func:`hpo.study._data.data_source_of`; ``None`` keeps what is stored). ``search=False`` (a
    verdict, which runs no search trial) enqueues none of them: an fp32 baseline enqueued then
    would wait for a run, which may pin another precision with ``--fix``. ``seed``: the run's --seed, ``None`` for the
    study's own (:func:`study_seed`). ``device``: the one this worker trains on, whose sampler models the study
    without the trials that say nothing of it (:func:`says_nothing_here`); ``None`` models every trial.
    """
    wanted = study_attrs(space, data, data_source)
    try:
        existing = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        existing = None
    if existing is not None:
        check_resumable(existing, space, wanted)
    wanted = {**wanted, SEED_ATTR: study_seed(existing, seed)}
    study = optuna.create_study(
        storage=storage,
        study_name=study_name,
        directions=space.directions,
        # TPE's random start counts trials that trained: an instant skip (a precision this machine cannot run) does not.
        sampler=space.build_sampler(wanted[SEED_ATTR], measured=counts_toward_budget,
                                    hidden=None if device is None else says_nothing_here(device)),
        pruner=space.build_pruner(),
        load_if_exists=True,
    )
    for key, value in wanted.items():
        if study.user_attrs.get(key) != value:
            study.set_user_attr(key, value)
    # Known-good configurations run before the baseline: they are there to find a good model early,
    # and the baseline, the speed reference, serves as well later. The space's entries are enqueued as
    # written, whichever run opens the study: a --fix pins (through the sampler) what an entry leaves to
    # be sampled, and an entry that sets another value waits for a run without that fix (for_the_budget),
    # never rewritten into a configuration it is not while its origin is spent.
    if search:
        enqueue_once(study, storage, [*space_entries(space), *known_good])
        _enqueue_baseline(study, space, storage)
    return study


def _enqueue_baseline(study: optuna.Study, space: SearchSpace, storage: optuna.storages.BaseStorage) -> bool:
    """Enqueue the fp32 baseline (every other parameter at its default) unless the study has one.

    Speedups are measured against it. Only when ``fp_precision`` is searched and includes
    fp32. Returns whether a trial was enqueued.
    """
    params = space.baseline_params()
    if params is None:
        return False
    with study_lock(storage, study.study_name):
        trials = study.get_trials(deepcopy=False)
        if any(is_baseline(t) for t in trials):
            return False
        # A known-good trial waiting with the very same params becomes the baseline: one run, not two.
        twin = next((t for t in trials if t.state == TrialState.WAITING and t.system_attrs.get("fixed_params") == params), None)
        if twin is not None:
            storage.set_trial_user_attr(twin._trial_id, BASELINE_ATTR, True)
            return False
        study.enqueue_trial(params, user_attrs={BASELINE_ATTR: True})
        return True


def enqueue_once(
    study: optuna.Study, storage: optuna.storages.BaseStorage, configurations: list[tuple[str, dict[str, Any]]],
    attrs: dict[str, dict[str, Any]] | None = None,
) -> int:
    """Enqueue each ``(origin, params)`` unless a trial of the study already came from ``origin``.

    A rerun or another worker opening the study enqueues nothing twice; params equal to an
    existing trial's (the fp32 baseline's, say) are not enqueued again, unless ``attrs`` gives
    the origin user attrs of its own (a verdict trial repeats params on purpose). Returns how many were.
    """
    if not configurations:
        return 0
    attrs = attrs or {}
    with study_lock(storage, study.study_name):
        done = origins_of(study.get_trials(deepcopy=False))
        before = len(study.get_trials(deepcopy=False))
        for origin, params in configurations:
            if origin not in done:
                extra = attrs.get(origin, {})
                study.enqueue_trial(params, user_attrs={ENQUEUED_FROM_ATTR: origin, **extra}, skip_if_exists=not extra)
        return len(study.get_trials(deepcopy=False)) - before


def _room_for_a_trial(study: optuna.Study, n_trials: int, max_retry: int | None, go_on: Callable[[], bool]) -> bool:
    """Whether this worker should start another trial; waits while other workers' running trials hold the rest of the budget.

    One of them may fail or its worker die: its trial, re-queued by the sweeps here, is then
    run by this worker. Without heartbeats a dead worker's trial is never released: no wait; nor for
    trials that no sweep can release (a ``grpc://`` worker's, which never beats).
    """
    while go_on():
        optuna.storages.fail_stale_trials(study)
        fail_dead_local_trials(study, max_retry)
        # The lock's own connection is not the storage's: a lost one is retried like every storage call.
        retry_lost_connection("re-queuing lost retries", lambda: _requeue_lost_retries(study, max_retry))
        finished, held = budget_used(study)
        if finished + len(held) < n_trials:
            return True
        if finished >= n_trials or not is_heartbeat_enabled(study._storage):
            return False
        if not releasable(held, study._storage):
            _logger.info("the rest of the budget is held by running trials %s, whose workers keep no heartbeat: "
                         "no sweep can release them, so this worker does not wait for them", [t.number for t in held])
            return False
        time.sleep(ROOM_POLL_S)
    return False


def _requeue_once(study: optuna.Study, trial: FrozenTrial, max_retry: int | None) -> None:
    """Re-queue the failed ``trial`` unless a retry of it exists, under the study's lock (the lost-retry sweep's test): once."""
    with study_lock(study._storage, study.study_name):
        retried = {number for t in study.get_trials(deepcopy=False) for number in t.system_attrs.get("retry_history", ())}
        if trial.number not in retried:
            RetryByTrialPolicy(max_retry)(study, trial)


def _queue_again(study: optuna.Study, trial: FrozenTrial, max_retry: int | None) -> None:
    """Queue what ``trial`` left undone: its retry, if interrupted; else its known-good configuration (drew_unsupported)."""
    if was_interrupted(trial):
        _requeue_once(study, trial, max_retry)
    else:
        _requeue_redraw(study, trial)


def drew_unsupported(trial: FrozenTrial) -> bool:
    """Whether ``trial``, a known-good configuration (the space's ``enqueue:`` entry, a warm start's) that leaves the
    precision to the sampler, was skipped for the precision drawn: not the configuration's fault, so it is queued again."""
    fixed = trial.system_attrs.get("fixed_params")
    return (skip_reason_of(trial) == SKIP_UNSUPPORTED and ENQUEUED_FROM_ATTR in trial.user_attrs
            and fixed is not None and "fp_precision" not in fixed and not is_verdict_trial(trial))


def _requeue_redraw(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue ``trial``'s configuration again, under the same origin, for the sampler to draw its precision anew: once per
    skipped trial, under the study's lock. Each draw that cannot run here is another such skip, none counted."""
    with study_lock(study._storage, study.study_name):
        if any(t.system_attrs.get(REDRAW_OF) == trial.number for t in study.get_trials(deepcopy=False)):
            return
        study.add_trial(optuna.trial.create_trial(
            state=TrialState.WAITING, user_attrs={ENQUEUED_FROM_ATTR: trial.user_attrs[ENQUEUED_FROM_ATTR]},
            system_attrs={"fixed_params": trial.system_attrs["fixed_params"], REDRAW_OF: trial.number},
        ))


def _requeue_interrupted(study: optuna.Study, trial_id: int, max_retry: int | None) -> None:
    """Re-queue trial ``trial_id``, stopped by a second signal: FAIL ``interrupted`` or with no reason (the mark's write lost),
    or RUNNING (the signal landed in Optuna's tell). A storage failing here leaves a marked one to the lost-retry sweep."""
    with contextlib.suppress(Exception):
        trial = study._storage.get_trial(trial_id)
        if trial.state == TrialState.RUNNING:  # this worker's own, which stops here
            fail_and_requeue(study, [(trial, "its worker was stopped by a second signal while Optuna told the trial")], max_retry)
        elif trial.state == TrialState.FAIL and trial.user_attrs.get(FAIL_REASON_ATTR) in (INTERRUPTED, None) and not skip_reason_of(trial):
            _requeue_once(study, trial, max_retry)


def _requeue_lost_retries(study: optuna.Study, max_retry: int | None) -> None:
    """Re-queue the failed trials whose re-queue was lost (``lost_retries``), each once, under the study's lock."""
    if not lost_retries(study.get_trials(deepcopy=False), study._storage, max_retry):
        return
    with study_lock(study._storage, study.study_name):  # another worker's sweep may be at the same trials
        lost = lost_retries(study.get_trials(deepcopy=False), study._storage, max_retry)
        retry = RetryByTrialPolicy(max_retry)
        for trial in lost:
            retry(study, trial)
    if lost:  # else another worker's sweep re-queued them first
        _logger.warning("re-queued trials %s: each had failed (stopped, or its worker died) and its re-queue was lost",
                        [t.number for t in lost])


def _queue_key(trial: FrozenTrial) -> tuple[str, object] | None:
    """What ``trial`` was queued for (the retry of a failed trial, the fp32 baseline, an enqueued configuration); ``None``
    for a trial the sampler proposed."""
    # The trial it retries: the last of its retry_history. Optuna's failed_trial is the chain's first trial, the same
    # for every retry of the chain: keyed by it, a second retry was taken for a copy of the first and never ran.
    if history := trial.system_attrs.get("retry_history"):
        return ("retry", history[-1])
    if (failed := trial.system_attrs.get("failed_trial")) is not None:  # a retry queued by hand, without a history
        return ("retry", failed)
    if is_baseline(trial):
        return ("baseline", None)
    origin = trial.user_attrs.get(ENQUEUED_FROM_ATTR)
    return None if origin is None else ("enqueued", origin)


def _duplicate_of(study: optuna.Study, trial: optuna.Trial) -> int | None:
    """The earlier trial queued for what ``trial`` was (:func:`_queue_key`), where workers with no lock between them (a
    ``grpc://`` proxy's) both queued it; ``None`` for the first. Placeholders that never ran do not count, nor the trial
    this one is the hand-back copy of (still RUNNING while it is marked ``over_budget``), nor a draw of a precision this
    machine could not run (:func:`drew_unsupported`), queued again."""
    frozen = study._storage.get_trial(trial._trial_id)
    if (key := _queue_key(frozen)) is None:
        return None
    copied_from = frozen.system_attrs.get(HANDED_BACK_FROM)
    earlier = (t.number for t in study.get_trials(deepcopy=False) if t.number < frozen.number and t.number != copied_from
               and not never_ran(t) and not drew_unsupported(t) and _queue_key(t) == key)
    return min(earlier, default=None)


def _requeue_if_enqueued(study: optuna.Study, trial: optuna.Trial) -> None:
    """An enqueued trial (the fp32 baseline, a known-good configuration, a retry and its checkpoint) that finds the budget
    full, another worker having taken the last slot while this one claimed it, goes back to the queue as a copy: skipped,
    it would be lost to the next extension of the budget."""
    frozen = study._storage.get_trial(trial._trial_id)
    if "fixed_params" in frozen.system_attrs or "failed_trial" in frozen.system_attrs:
        attrs = {k: v for k, v in frozen.user_attrs.items() if k != BUDGET_SLOT_ATTR}
        study.add_trial(optuna.trial.create_trial(  # a retry's params too: it resumes a checkpoint trained with them
            state=TrialState.WAITING, params=frozen.params, distributions=frozen.distributions, user_attrs=attrs,
            system_attrs={**frozen.system_attrs, HANDED_BACK_FROM: frozen.number},
        ))


def _not_to_start(study: optuna.Study, trial: optuna.Trial, n_trials: int) -> tuple[str, str] | None:
    """Why this worker must not start ``trial`` (``(skip reason, why)``): a duplicate in the queue, or no slot of the
    budget left; ``None`` once it holds its slot."""
    if (first := _duplicate_of(study, trial)) is not None:
        return SKIP_DUPLICATE, f"queued twice by workers with no lock between them: trial {first} is the first copy"
    # The lock's own connection is not the storage's: a lost one is retried like every storage call.
    if not retry_lost_connection("taking a slot of the budget", lambda: take_slot(study, trial, n_trials)):
        return SKIP_OVER_BUDGET, OVER_BUDGET_DETAIL
    return None


def _skip_unstarted(study: optuna.Study, trial: optuna.Trial, reason: str, why: str) -> NoReturn:
    """Prune ``trial`` unstarted: over the budget (an enqueued one goes back as a copy; this worker stops), or a duplicate."""
    defer_second_signal()  # until told (run_to_budget ends it): a second signal then loses no queued trial
    if reason == SKIP_OVER_BUDGET:
        _requeue_if_enqueued(study, trial)
        study.stop()
    set_user_attrs(trial, {SKIP_REASON_ATTR: reason, SKIP_DETAIL_ATTR: why})
    raise optuna.TrialPruned(why)


def _optimize(
    study: optuna.Study, objective: Callable[[optuna.Trial], Any], timeout: float | None,
    after_trial: Callable[[optuna.Study, FrozenTrial], None], running: Callable[[], int | None], max_retry: int | None,
) -> None:
    """``study.optimize``, not stopped by a trial another worker's sweep failed under this one (its heartbeat stale in an
    outage past the grace period; Optuna's tell then raises). A second signal re-queues the trial ``running()`` names."""
    try:
        with heap_frozen():  # the collections between trials walk what the trials made, not the libraries and data
            study.optimize(objective, timeout=timeout, callbacks=[after_trial], catch=(Exception,))
    except BaseException as err:
        end_deferral(raise_owed=False)  # a tell that failed: a second signal it deferred is raised at the next poll
        if (trial_id := running()) is not None and second_signal_in(err):
            _requeue_interrupted(study, trial_id, max_retry)
        finished = (TrialState.FAIL, TrialState.COMPLETE, TrialState.PRUNED)
        if not isinstance(err, ValueError) or str(err) not in (f"Cannot tell a {state.name} trial." for state in finished):
            raise
        _logger.warning("the trial this worker ran was failed by another worker while this one could not reach the database "
                        "(its heartbeat went stale); its retry resumes from its last checkpoint")


def run_to_budget(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], float],
    n_trials: int,
    *, timeout: float | None = None,
    on_trial_finished: Callable[[FrozenTrial, int], None] | None = None, on_told: Callable[[FrozenTrial], None] | None = None,
    stop_requested: Callable[[], bool] | None = None, max_retry: int | None = None,
) -> None:
    """Run trials until the study, across all workers and runs, has ``n_trials`` finished ones.

    A study already at its budget runs nothing, so rerunning a command after a crash runs only the remainder. Raises
    :class:`TooManyFailuresError` after several failures in a row. Stops after the current trial once ``stop_requested()``;
    a trial it interrupted is re-queued (up to ``max_retry`` times) so that the next run resumes it; a second signal once
    its trial has trained ends the run after the tell (:func:`defer_second_signal`). ``on_trial_finished(trial, finished)``
    gets each ended trial and the study's count toward the budget as it ended; ``on_told(trial)`` gets it first.
    """
    failures, stopping = 0, stop_requested or (lambda: False)
    running: list[int | None] = [None]  # the id of the trial this worker runs (None: handed back, the budget full)

    def after_trial(study: optuna.Study, trial: FrozenTrial) -> None:
        nonlocal failures
        if on_told is not None:
            on_told(trial)
        trials = study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
        finished, held = budget_of(trials)  # held: by other workers' running trials, this one has ended
        if on_trial_finished is not None:  # the study's position when it ended: other workers' trials may have ended since
            on_trial_finished(trial, finished_when(trials, trial))
        interrupted = was_interrupted(trial)
        if interrupted or drew_unsupported(trial):
            retry_lost_connection("re-queuing a trial", lambda: _queue_again(study, trial, max_retry))
        # Bad enqueued values say nothing about the environment: they do not count as failures in a row.
        invalid = fail_reason_of(trial).startswith(f"{InvalidTrialError.__name__}:")
        failures = failures + 1 if trial.state == TrialState.FAIL and not (interrupted or invalid) else 0
        if failures >= MAX_CONSECUTIVE_FAILURES or finished + len(held) >= n_trials or stopping():
            study.stop()
        end_deferral()  # the trial is told: a second signal its last writes deferred ends the run now

    def budgeted(trial: optuna.Trial) -> float | Sequence[float]:
        running[0] = trial._trial_id
        if (skip := _not_to_start(study, trial, n_trials)) is not None:
            running[0] = None  # first: a retry copied back to the queue, then interrupted, is not re-queued twice
            _skip_unstarted(study, trial, *skip)
        return objective(trial)

    deadline = None if timeout is None else time.monotonic() + timeout

    def go_on() -> bool:
        return failures < MAX_CONSECUTIVE_FAILURES and not stopping() and (deadline is None or time.monotonic() < deadline)

    # Sweeps first: a worker of this machine killed mid-trial (SIGKILL, OOM killer) is found at once, not after the grace period.
    while _room_for_a_trial(study, n_trials, max_retry, go_on):
        remaining = None if deadline is None else deadline - time.monotonic()
        _optimize(study, budgeted, remaining, after_trial, lambda: running[0], max_retry)
    # Optuna sweeps dead workers' trials when a trial starts; sweep once more on the way out.
    optuna.storages.fail_stale_trials(study)
    fail_dead_local_trials(study, max_retry)
    if failures >= MAX_CONSECUTIVE_FAILURES:
        last = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))[-1]
        reason = fail_reason_of(last, "unknown error").strip().splitlines()[0]
        raise TooManyFailuresError(f"{failures} trials failed in a row (last, trial {last.number}: {reason})")
