"""The verdict phase: the study's best configuration re-trained once per supported precision and seed.

Verdict trials are ordinary trials of the study, marked with :data:`hpo._attrs.VERDICT_TRIAL_ATTR`
and enqueued once per study through :func:`hpo.study._study.enqueue_once` (origin
``verdict:<trial>:<precision>:<seed>``), so that every worker shares them, a rerun enqueues
nothing twice and a killed worker's trial is retried like any other. Seeds are paired: seed
``i`` is the same for every precision (the objective trains a verdict trial with the verdict's
seed, not the trial number's), so data order and the initial head match across precisions.

A verdict worker claims its plan's waiting trials only: it never samples a new trial nor runs
another waiting trial (see :class:`_ClaimingStorage`). Verdict trials do not count toward ``--n-trials``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import VERDICT_TRIAL_ATTR, config_of, is_verdict_trial, stored_space, verdict_trial_of
from hpo._errors import UserError
from hpo._ranking import best_trials, why_no_best
from hpo.space._fixes import canonical_precision, same_value
from hpo.study._budget import finished_count
from hpo.study._liveness import fail_dead_local_trials
from hpo.study._study import enqueue_once, run_to_budget
from trial_executor import PRECISIONS

if TYPE_CHECKING:
    from hpo.space import SearchSpace
    from hpo.study._options import RunOptions

DEFAULT_VERDICT_SEEDS = 3
MAX_VERDICT_SEEDS = 30  # the t-quantiles are exact for up to 29 degrees of freedom
_POLL_SECONDS = 2.0
_UNFINISHED = (TrialState.WAITING, TrialState.RUNNING)


def verdict_after_budget(space: SearchSpace, options: RunOptions) -> tuple[int, list[str]] | None:
    """The seeds and precisions of the verdict a run makes once it has its budget (``--verdict SEEDS`` or the
    space's ``verdict:``), ``None`` when it makes none; checked against the space (:func:`verdict_precisions`),
    so a run refuses an impossible verdict before it trains."""
    spec = space.verdict
    seeds = options.verdict or (spec.seeds if spec else None)
    if not seeds:
        return None
    if len(space.directions) > 1:  # the verdict of a Pareto front's trial needs its number: known only afterwards
        raise UserError("a run's verdict re-trains the best trial, and a space with several objectives has a Pareto front "
                        "instead; run the study without --verdict (or the space's verdict:), then `python -m hpo verdict "
                        "--trial N` with one of the trials `python -m hpo best` lists")
    return seeds, verdict_precisions(space.stored_form()["params"], spec.precisions if spec else None)


def verdict_due(study: optuna.Study, space: SearchSpace, options: RunOptions) -> tuple[int, list[str]] | None:
    """The verdict a run makes once its trials are done (:func:`verdict_after_budget`), or ``None``: none asked for,
    or ``--timeout`` ended the run before the budget. A verdict re-trains the study's best, which a cut study has
    not found yet, and --timeout means no new trial after it: a rerun finishes the budget, then makes the verdict."""
    wanted = verdict_after_budget(space, options)
    return None if wanted is not None and _cut_short(study, options) else wanted


def nothing_left(study: optuna.Study, space: SearchSpace, options: RunOptions) -> bool:
    """Whether a run would train nothing: the study holds its budget and no verdict is due after it."""
    return finished_count(study) >= options.n_trials and verdict_due(study, space, options) is None


def _cut_short(study: optuna.Study, options: RunOptions) -> bool:
    # Without --timeout, fewer finished trials than the budget only means other workers still finish theirs.
    return options.timeout is not None and finished_count(study) < options.n_trials


def cut_short_line(study: optuna.Study, space: SearchSpace, options: RunOptions) -> str | None:
    """The line a run prints when --timeout ended it before its budget (and kept its verdict from starting, if it asked
    for one: :func:`verdict_due`); ``None`` when it was not cut short."""
    if not _cut_short(study, options):
        return None
    ended = f"--timeout ended the run at {finished_count(study)} of {options.n_trials} budgeted trials; rerun the same command to finish them"
    return ended if verdict_after_budget(space, options) is None else f"verdict not started: {ended} and make the verdict"


def verdict_precisions(params: dict[str, Any], precisions: Sequence[str] | None) -> list[str]:
    """The precisions a verdict compares, in the registry's order: ``precisions`` as given, else those the space
    (its stored ``params``) searches, every one when it searches none; fp32 must be among them."""
    searched = params.get("fp_precision") or {}
    choices = [canonical_precision(c) for c in searched.get("choices", [])] or list(PRECISIONS)
    if precisions is None:
        if "fp32" not in choices:
            raise UserError(f"the space's fp_precision choices {searched['choices']} lack fp32, which a verdict compares "
                            "every precision with; add fp32 to them")
        if len(set(choices)) < 2:
            raise UserError(f"the space's fp_precision choices {searched['choices']} hold fp32 alone: a verdict compares it with "
                            "other precisions; widen the space")
        return [p for p in PRECISIONS if p in choices]
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        raise UserError(f"--precisions: unknown {', '.join(unknown)}; choose from {', '.join(PRECISIONS)}")
    if "fp32" not in precisions:
        raise UserError("--precisions must include fp32: every precision is compared with it")
    if set(precisions) == {"fp32"}:
        raise UserError("--precisions names fp32 alone: a verdict compares it with other precisions; add one (e.g. --precisions fp32 bf16)")
    outside = [p for p in precisions if p not in choices]
    if outside:
        raise UserError(f"--precisions {', '.join(outside)}: not among the space's fp_precision choices "
                        f"{searched['choices']}; drop them with --precisions, or widen the space")
    return [p for p in PRECISIONS if p in precisions]


@dataclass(frozen=True)
class VerdictPlan:
    """Which trial is re-trained, with which seeds and precisions (its cost: :mod:`hpo.reporting._verdict_cost`)."""

    source: FrozenTrial
    seeds: list[int]
    precisions: list[str]  # supported here, in the registry's order; fp32 first
    unsupported: dict[str, str]  # precision -> why this machine cannot run it

    @property
    def n_trials(self) -> int:
        return len(self.seeds) * len(self.precisions)

    def includes(self, trial: FrozenTrial) -> bool:
        """Whether ``trial`` is one of this plan's verdict trials (any attempt)."""
        marker = verdict_trial_of(trial) or {}
        return (marker.get("of_trial") == self.source.number and marker.get("precision") in self.precisions
                and marker.get("seed") in self.seeds)


def source_trial(study: optuna.Study, trial_number: int | None = None) -> FrozenTrial:
    """The configuration a verdict re-trains: trial ``trial_number``, else the best ordinary (non-verdict) trial."""
    if trial_number is not None:
        found = [t for t in study.get_trials(deepcopy=False) if t.number == trial_number]
        if not found or found[0].state != TrialState.COMPLETE or verdict_trial_of(found[0]) is not None:
            raise UserError(f"--trial {trial_number}: study {study.study_name!r} has no such complete ordinary trial; "
                            "pick one listed by `python -m hpo report`")
        return found[0]
    best = best_trials(study)
    if len(study.directions) > 1 and best:
        raise UserError(f"study {study.study_name!r} has several objectives: pass --trial N, one of its Pareto front "
                        "(`python -m hpo best` lists it)")
    if not best:  # several objectives too: an empty front is no list to pick from
        raise UserError(f"study {study.study_name!r} has no best trial to re-train: {why_no_best(study)}; run more trials with "
                        "`python -m hpo run`, or pass --trial N")
    return best[0]


def check_verdict_arguments(seeds: Any, precisions: Any, trial: Any) -> None:
    """:func:`hpo.verdict`'s arguments of the right types, else one :class:`UserError` (the command's parser checks its flags)."""
    whole = [(name, value) for name, value in (("seeds", seeds), ("trial", trial)) if value is not None]
    for name, value in whole:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{name} must be a whole number, got {value!r}; pass e.g. {name}={3 if name == 'seeds' else 0}")
    if precisions is not None and (isinstance(precisions, str) or not all(isinstance(p, str) for p in precisions)):
        raise UserError(f"precisions must be a list of precision names, got {precisions!r}; pass e.g. precisions=['fp32', 'bf16']")


def plan_verdict(
    study: optuna.Study, support: dict[str, str | None], *, seeds: int = DEFAULT_VERDICT_SEEDS,
    precisions: Sequence[str] | None = None, trial_number: int | None = None, device_type: str = "this device",
) -> VerdictPlan:
    """The verdict of ``study`` on a machine (a ``device_type`` one, named in errors) whose ``support`` (precision -> reason
    or ``None``) is given; ``precisions``: see :func:`verdict_precisions`, of which fp32 and another must run here."""
    if not 2 <= seeds <= MAX_VERDICT_SEEDS:
        raise UserError(f"--seeds must be between 2 and {MAX_VERDICT_SEEDS} (an interval needs two paired seeds), got {seeds}")
    wanted = verdict_precisions(stored_space(study).get("params") or {}, precisions)
    runs, unsupported = runnable_precisions(wanted, support, device_type)  # before a trial is chosen, enqueued or trained
    source = source_trial(study, trial_number)
    base = int(config_of(source).get("seed", 0))
    return VerdictPlan(source, [base + i for i in range(seeds)], runs, unsupported)


def runnable_precisions(wanted: Sequence[str], support: Mapping[str, str | None], device_type: str) -> tuple[list[str], dict[str, str]]:
    """``wanted`` split into the precisions this machine runs and those it cannot (with why), by ``support``
    (precision -> reason, ``None`` when it runs); a :class:`UserError` unless fp32 and another precision run here."""
    unsupported = {p: str(support.get(p, "unknown precision")) for p in wanted if support.get(p, "?") is not None}
    if "fp32" in unsupported:
        raise UserError(f"this machine cannot run fp32 ({unsupported['fp32']}): there is nothing to compare with")
    runs = [p for p in wanted if p not in unsupported]
    if len(runs) < 2:  # fp32 alone: its trials would train and the stored verdict be replaced by one that compares nothing
        others = [p for p in PRECISIONS if p != "fp32" and support.get(p, "?") is None]
        add = f"add one it runs ({', '.join(others)}) to the precisions compared, or " if others else ""
        raise UserError(f"on this machine ({device_type}) only fp32 of {', '.join(wanted)} can run: nothing to compare it with "
                        f"({'; '.join(f'{p}: {why}' for p, why in unsupported.items())}); {add}make the verdict where "
                        f"{', '.join(unsupported)} can run")
    return runs, unsupported


def check_verdict_runs_here(precisions: Sequence[str], device: str) -> None:
    """A run's verdict (:func:`verdict_after_budget`'s ``precisions``) can compare something on ``device``: refused before
    the study trains, not after (see :func:`runnable_precisions`)."""
    from trial_executor import precision_support, resolve_device

    resolved = resolve_device(device)
    runnable_precisions(precisions, precision_support(resolved), resolved.type)


def enqueue_verdict(study: optuna.Study, storage: optuna.storages.BaseStorage, plan: VerdictPlan) -> int:
    """Enqueue the plan's trials once per study, seed by seed (pairs finish together); how many were new."""
    searched = "fp_precision" in plan.source.params
    configurations, attrs = [], {}
    for index, seed in enumerate(plan.seeds):
        for precision in plan.precisions:
            origin = f"verdict:{plan.source.number}:{precision}:{seed}"
            params = {**plan.source.params, **({"fp_precision": precision} if searched else {})}
            configurations.append((origin, params))
            marker = {"of_trial": plan.source.number, "precision": precision, "seed": seed, "seed_index": index}
            attrs[origin] = {VERDICT_TRIAL_ATTR: marker}
    return enqueue_once(study, storage, configurations, attrs)


class NoWaitingTrialError(Exception):
    """A verdict worker found no waiting trial to claim: its share of the verdict is done."""


class _ClaimingStorage(BaseHeartbeat):
    """``storage`` for a worker that may claim only the waiting trials that are ``claimable``.

    ``Study.ask`` claims the oldest WAITING trial atomically, else creates a new trial. Waiting
    trials that are not ``claimable`` are not offered to it: a verdict worker claims its verdict's trials only,
    an ordinary worker every waiting trial but verdict trials (which it would otherwise train as
    budget trials, or skip as over the budget when the budget is full, losing a seed of the verdict).
    Without ``may_create`` the creation raises :class:`NoWaitingTrialError` instead, so two verdict
    workers racing for the last verdict trial never add a sampled trial. Re-queuing (a template trial) goes through.
    """

    def __init__(self, storage: optuna.storages.BaseStorage, claimable: Callable[[FrozenTrial], bool], *, may_create: bool) -> None:
        self._inner, self._claimable, self._may_create = storage, claimable, may_create

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def get_all_trials(self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        found = self._inner.get_all_trials(study_id, deepcopy=deepcopy, states=states)
        if states is None or set(states) != {TrialState.WAITING}:
            # Only the claim (Study.ask's query for waiting trials) is filtered: the sweeps must see every retry waiting,
            # or one hidden here looks lost and is re-queued a second time (lost_retries).
            return found
        return [t for t in found if self._claimable(t)]

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        if template_trial is None and not self._may_create:
            raise NoWaitingTrialError
        return self._inner.create_new_trial(study_id, template_trial)

    # Heartbeats as the wrapped storage has them (none for a storage without).
    def record_heartbeat(self, trial_id: int) -> None:
        self._inner.record_heartbeat(trial_id)  # type: ignore[attr-defined]

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return self._inner._get_stale_trial_ids(study_id)  # type: ignore[attr-defined]

    def get_heartbeat_interval(self) -> int | None:
        return self._inner.get_heartbeat_interval() if isinstance(self._inner, BaseHeartbeat) else None

    def get_heartbeat_stale_trial_callback(self) -> Callable[[optuna.Study, FrozenTrial], None] | None:
        return self._inner.get_heartbeat_stale_trial_callback()  # type: ignore[attr-defined]


def _claiming(study: optuna.Study, claimable: Callable[[FrozenTrial], bool], *, may_create: bool) -> optuna.Study:
    storage = _ClaimingStorage(study._storage, claimable, may_create=may_create)
    return optuna.Study(study.study_name, storage, sampler=study.sampler, pruner=study.pruner)


def for_the_budget(study: optuna.Study, fixes: Mapping[str, Any]) -> optuna.Study:
    """``study`` for the workers of its budget (see :class:`_ClaimingStorage`): they never claim a waiting verdict trial,
    nor, in a run with ``--fix`` (``fixes``), a waiting trial whose params say otherwise (an fp32 baseline enqueued
    before a ``--fix fp_precision=bf16`` run, an earlier run's retry): it waits for a run that does not pin them."""

    def claimable(trial: FrozenTrial) -> bool:
        params = {**trial.params, **trial.system_attrs.get("fixed_params", {})}
        return not is_verdict_trial(trial) and all(same_value(name, params.get(name, value), value) for name, value in fixes.items())

    return _claiming(study, claimable, may_create=True)


def run_verdict_trials(
    study: optuna.Study, objective: Callable[[optuna.Trial], Any], plan: VerdictPlan, *,
    max_retry: int | None = None, on_trial_finished: Callable[[FrozenTrial, int], None] | None = None,
    on_told: Callable[[FrozenTrial], None] | None = None, stop_requested: Callable[[], bool] | None = None,
) -> None:
    """Run the plan's waiting trials until none of them is waiting or running (other trials are left alone).

    Other workers' running trials are waited for; one whose worker died is failed (its process
    gone on this machine at once, elsewhere after the heartbeat grace period) and re-queued,
    then claimed here.
    """
    mine = plan.includes
    claiming = _claiming(study, mine, may_create=False)
    while not (stop_requested is not None and stop_requested()):
        with contextlib.suppress(NoWaitingTrialError):
            run_to_budget(claiming, objective, sys.maxsize, on_trial_finished=on_trial_finished, on_told=on_told,
                          stop_requested=stop_requested, max_retry=max_retry)
        if not [t for t in study.get_trials(deepcopy=False, states=_UNFINISHED) if mine(t)]:
            return
        time.sleep(_POLL_SECONDS)
        optuna.storages.fail_stale_trials(study)
        fail_dead_local_trials(study, max_retry)
