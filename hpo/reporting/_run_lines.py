"""What a run prints: one line per finished trial, and the summary at its end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import (
    CHECKPOINT_ATTR,
    CONSTRAINTS_ATTR,
    INTERRUPTED_AT_STEP_ATTR,
    PEAK_MEMORY_ATTR,
    SKIP_DETAIL_ATTR,
    THROUGHPUT_ATTR,
    fail_reason_of,
    is_cpu_contended,
    is_feasible,
    is_majority_class,
    is_verdict_trial,
    majority_class_hint,
    skip_reason_of,
    startup_seconds_of,
)
from hpo._ranking import best_trials
from hpo.reporting._numbers import number_text, trials_text
from hpo.space._measures import measured_value
from hpo.storage._storage import GRPC_SCHEME, STORAGE_ENV, mask_url
from hpo.study._budget import finished_count
from hpo.study._outcomes import (
    OVER_BUDGET_DETAIL,
    SKIP_DUPLICATE,
    SKIP_NON_FINITE,
    SKIP_OOM,
    SKIP_OVER_BUDGET,
    SKIP_UNSUPPORTED,
    counted_state,
    never_ran,
)


def _format_value(value: object) -> str:
    return number_text(value) if isinstance(value, float) else str(value)


def _objective_values(trial: FrozenTrial, names: Sequence[str]) -> str:
    values = trial.values if trial.state == TrialState.COMPLETE else [measured_value(trial.user_attrs, n) for n in names]
    return "  ".join(f"{name}={_format_value(value)}" for name, value in zip(names, values, strict=True))


STARTUP_SAID_SHARE = 0.5  # a trial line names its start-up time when it was at least this share of the training loop


def trial_line(trial: FrozenTrial, names: Sequence[str]) -> str:
    """One line per finished trial: number, state, objective values, params, samples/s, peak memory."""
    params = " ".join(f"{k}={_format_value(v)}" for k, v in trial.params.items())
    attrs = trial.user_attrs
    if skip_reason_of(trial) == SKIP_UNSUPPORTED:
        return f"trial {trial.number:>3}  SKIPPED   {params}  ({attrs.get(SKIP_DETAIL_ATTR)})"
    if never_ran(trial):
        return f"trial {trial.number:>3}  NOT RUN   ({attrs.get(SKIP_DETAIL_ATTR) or OVER_BUDGET_DETAIL}; not counted)"
    if skip_reason_of(trial) in (SKIP_NON_FINITE, SKIP_OOM):
        return f"trial {trial.number:>3}  PRUNED    {params}  ({skip_reason_of(trial)}: {attrs.get(SKIP_DETAIL_ATTR)})"
    if trial.state == TrialState.FAIL:
        return f"trial {trial.number:>3}  FAIL      {params}  ({fail_reason_of(trial, 'see the log above')})"
    parts = [f"trial {trial.number:>3}", f"{trial.state.name:<9}", _objective_values(trial, names), params]
    if "throughput_samples_per_s" in attrs:
        parts.append(f"{attrs[THROUGHPUT_ATTR]:.0f} samples/s")
        parts.append(f"{attrs[PEAK_MEMORY_ATTR]:.0f} MB peak")
    startup = startup_seconds_of(trial)
    if startup is not None and startup[0] >= max(1.0, STARTUP_SAID_SHARE * startup[1]):
        # Samples/s leave start-up out; said when it was at least half the loop (session 23: 98% compiling on an H200).
        parts.append(f"(start-up {startup[0]:.0f} s of {startup[1]:.0f} s training: the first steps of each batch shape, "
                     "compiling included; not in samples/s)")
    if is_cpu_contended(trial):
        # Another process on the same cores (a second run started by hand, a build) slows a trial many times over.
        parts.append(f"(CPU-contended: waited {attrs.get('cpu_wait_fraction', 0):.0%} of its time for a core other processes held; "
                     "its samples/s are partly theirs)")
    if is_majority_class(trial):
        # Too high a rate collapses a model onto one class; too few steps at a low one never leave it.
        parts.append(f"(majority class: learned nothing; {majority_class_hint([trial], short=True)})")
    if not is_feasible(trial):
        parts.append(f"(violates {', '.join(k for k, c in attrs[CONSTRAINTS_ATTR].items() if not c['satisfied'])})")
    return "  ".join(parts)


def finished_of_budget(finished: int, budget: int) -> str:
    """``3 of 8 budgeted``; a study never shrinks: run again with a smaller --n-trials, ``3 (more than the 2 budgeted)``."""
    return f"{finished} of {budget} budgeted" if finished <= budget else f"{finished} (more than the {budget} budgeted)"


def run_summary(study: optuna.Study, url: str, budget: int, names: Sequence[str]) -> str:
    """What a run prints at its end: trials by outcome, the best trial (or Pareto front), how to browse the study."""
    everything = study.get_trials(deepcopy=False)
    trials = [t for t in everything if not is_verdict_trial(t)]  # the search's; the verdict's are counted apart
    counted = Counter(counted_state(t) for t in trials)
    verdict = Counter(t.state.name.lower() for t in everything if is_verdict_trial(t))
    verdict_note = f", verdict trials ({', '.join(f'{s} {n}' for s, n in sorted(verdict.items()))})" if verdict else ""
    reasons = Counter(skip_reason_of(t) for t in trials)
    not_run, duplicates = reasons[SKIP_OVER_BUDGET], reasons[SKIP_DUPLICATE]
    diverged, oom = reasons[SKIP_NON_FINITE], reasons[SKIP_OOM]
    why = f" ({diverged} {SKIP_NON_FINITE}, {oom} {SKIP_OOM})" if diverged or oom else ""
    shown = mask_url(url)
    finished = finished_count(study)
    of_budget = finished_of_budget(finished, budget)
    lines = [
        "",
        f"Study {study.study_name!r} in {shown}: {of_budget} trials finished "
        f"({counted['COMPLETE']} complete, {counted['PRUNED']} pruned{why}); "
        f"not counted: {counted['FAIL']} failed, {counted['SKIPPED']} skipped as unsupported on this machine"
        f"{f', {not_run} not run (the budget was held by running trials)' if not_run else ''}"
        f"{f', {duplicates} not run (duplicates in the queue)' if duplicates else ''}{verdict_note}",
    ]
    waiting = [t.number for t in trials if t.state == TrialState.WAITING]
    if waiting:  # a --fix run leaves those it does not allow; a full budget leaves an enqueued trial
        lines.append(f"Waiting in the queue: {trials_text(waiting)} "
                     "(a run whose --fix allows them, or a larger --n-trials, trains them)")
    running = [t.number for t in trials if t.state == TrialState.RUNNING]
    if running:  # this run is done, the study not: another worker's trials (or a dead one's, failed after its grace period)
        lines.append(f"Still running: {trials_text(running)} "
                     "(other workers'; `python -m hpo status` shows where)")
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    # Among trials meeting the space's constraints: the best trial, or the Pareto front.
    front = best_trials(study)
    for best in front:
        label = "Best trial" if len(names) == 1 else "Pareto-front trial"
        lines.append(f"{label} {best.number}: {_objective_values(best, names)}")
        lines += [f"  {k}: {_format_value(v)}" for k, v in best.params.items()]
    if not complete:
        lines.append("No trial has completed yet.")
    elif not front:
        lines.append("No completed trial meets the space's constraints.")
    # optuna-dashboard opens database URLs only; through the storage proxy, the project's command serves it.
    browse = f"python -m hpo dashboard --storage {shown}" if url.startswith(GRPC_SCHEME) else f"optuna-dashboard {shown}"
    lines.append(f"Browse it:  {browse}")
    if shown != url:
        lines.append(f"  (the password is masked: run `optuna-dashboard \"${STORAGE_ENV}\"` with ${STORAGE_ENV} set to the full URL)")
    return "\n".join(lines)


def stop_checkpoint_lost(trial: FrozenTrial) -> int | None:
    """For a trial stopped by a signal whose checkpoint at the stop was not saved (a full or read-only artifact store,
    none at all): the step its retry resumes from (0: from scratch); ``None`` when it was saved."""
    stopped_at = trial.user_attrs.get(INTERRUPTED_AT_STEP_ATTR)
    saved = trial.user_attrs.get(CHECKPOINT_ATTR) or {}
    if stopped_at is None or saved.get("step") == stopped_at:
        return None
    return int(saved.get("step") or 0)


def stopped_line(prog: str, interrupted: Sequence[int], lost: Mapping[int, int] | None = None, met_budget: int | None = None) -> str:
    """A run's last line after SIGINT/SIGTERM: the ``interrupted`` trials it checkpointed and re-queued, or that none was.

    ``lost``: trial number -> the step its retry resumes from, for those whose checkpoint at the stop was not saved
    (:func:`stop_checkpoint_lost`): the line must not say they were checkpointed. ``met_budget``: the study's budget,
    when the run saw it reached: with no trial interrupted there is nothing to rerun."""
    if met_budget is not None and not interrupted:
        return f"{prog}: stopped by a signal after the study reached its budget of {met_budget} finished trial{'s' * (met_budget != 1)}: nothing to resume"
    lost = lost or {}
    saved = sorted(n for n in interrupted if n not in lost)
    unsaved = [f"trial {n} was re-queued without a checkpoint at the stop (it resumes from step {lost[n]})"
               for n in sorted(n for n in interrupted if n in lost)]
    if not interrupted:
        what = "stopped by a signal between trials, none interrupted"
    elif saved:
        what = f"stopped by a signal; {trials_text(saved)} {'was' if len(saved) == 1 else 'were'} checkpointed and re-queued"
    else:
        what = "stopped by a signal"
    what = "; ".join([what, *unsaved])
    return f"{prog}: {what}: rerun the same command to resume the study"
