"""Where each study stands: trials by state, the best so far, and who runs what, with heartbeat ages."""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import (
    WORKER_ATTR,
    is_cpu_contended,
    is_host_limited,
    is_majority_class,
    is_verdict_trial,
    majority_class_hint,
    skip_reason_of,
    stored_data_source,
)
from hpo._ranking import best_trials, why_no_best
from hpo.reporting._numbers import number_text, trials_text
from hpo.storage._heartbeats import heartbeat_ages
from hpo.storage._inspect import objective_names
from hpo.study._data import data_flags
from hpo.study._liveness import worker_is_gone
from hpo.study._outcomes import SKIP_DUPLICATE, SKIP_OVER_BUDGET, counted_state


@dataclass
class RunningTrial:
    number: int
    worker: str
    running_for: datetime.timedelta | None
    since_heartbeat: datetime.timedelta | None  # None: no heartbeat recorded (heartbeats off)
    worker_gone: bool = False  # its worker ran on this machine and has exited


@dataclass
class StudyStatus:
    name: str
    objectives: list[tuple[str, str]]
    counts: dict[str, int]
    skipped: int = 0
    not_run: int = 0  # over_budget placeholders: pruned, never trained
    duplicates: int = 0  # second copies of a queued trial, withdrawn when claimed: pruned, never trained
    best: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    no_best: str = ""  # why there is no best trial, while there is none
    running: list[RunningTrial] = field(default_factory=list)
    host_limited: list[int] = field(default_factory=list)  # trials whose device waited for the host
    cpu_contended: list[int] = field(default_factory=list)  # trials whose threads waited for cores other processes held
    majority_class: list[int] = field(default_factory=list)  # trials that never left the majority class
    majority_class_hint: str = ""  # why, as far as their learning rates tell (hpo._attrs.majority_class_hint)
    verdict: dict[str, int] = field(default_factory=dict)  # verdict trials by state (hpo verdict), not counted
    data: str | None = None  # the data flags it last ran with (None: data given in Python, or a study made elsewhere)


def _worker(trial: FrozenTrial) -> str:
    worker = trial.user_attrs.get(WORKER_ATTR)
    if isinstance(worker, dict):
        ray = f" (Ray worker {worker['ray_worker'][:8]} on node {worker.get('ray_node', '?')[:8]})" if worker.get("ray_worker") else ""
        return f"{worker.get('host', '?')} pid {worker.get('pid', '?')}{ray}"
    return "unknown worker"


def _best(study: optuna.Study, names: list[str]) -> list[tuple[int, dict[str, float]]]:
    return [(t.number, dict(zip(names, t.values, strict=True))) for t in best_trials(study)]


def study_status(storage: optuna.storages.BaseStorage, study: optuna.Study) -> StudyStatus:
    """Counts by state, the best trial (or Pareto front), the data flags it ran with, and every running trial's worker and
    heartbeat age."""
    trials = study.get_trials(deepcopy=False)
    search = [t for t in trials if not is_verdict_trial(t)]  # the verdict's are counted on a line of their own
    names = objective_names(study)
    counts = {state.name: sum(t.state == state for t in search) for state in TrialState}
    status = StudyStatus(study.study_name, [(n, d.name.lower()) for n, d in zip(names, study.directions, strict=True)], counts)
    reasons = Counter(skip_reason_of(t) for t in search)
    status.not_run, status.duplicates = reasons[SKIP_OVER_BUDGET], reasons[SKIP_DUPLICATE]
    status.skipped = sum(counted_state(t) == "SKIPPED" for t in search)
    status.best = _best(study, names)
    status.no_best = "" if status.best else why_no_best(study)
    status.host_limited = sorted(t.number for t in trials if is_host_limited(t))
    status.cpu_contended = sorted(t.number for t in trials if is_cpu_contended(t))
    status.majority_class = sorted(t.number for t in trials if is_majority_class(t))
    status.majority_class_hint = majority_class_hint(t for t in trials if is_majority_class(t))
    status.verdict = dict(Counter(t.state.name.lower() for t in trials if is_verdict_trial(t)))
    source = stored_data_source(study)
    status.data = None if source is None else data_flags(source)
    running = [t for t in trials if t.state == TrialState.RUNNING]
    ages = heartbeat_ages(storage, [t._trial_id for t in running])
    now = datetime.datetime.now()
    for trial in running:
        started = now - trial.datetime_start if trial.datetime_start else None
        status.running.append(RunningTrial(trial.number, _worker(trial), started, ages.get(trial._trial_id), worker_is_gone(trial)))
    return status


def _ago(delta: datetime.timedelta | None) -> str:
    if delta is None:
        return "?"
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def _values(values: dict[str, float]) -> str:
    return " ".join(f"{name}={number_text(value)}" for name, value in values.items())


def status_lines(status: StudyStatus) -> list[str]:
    """The study's status as indented text lines."""
    goal = ", ".join(f"{direction} {name}" for name, direction in status.objectives)
    order = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")
    shown = [f"{state.lower()} {status.counts[state]}" for state in order if status.counts[state] or state != "WAITING"]
    apart = [f"{n} {what}" for n, what in ((status.skipped, "skipped as unsupported"), (status.not_run, "not run: the budget was held"),
                                           (status.duplicates, "not run: duplicates in the queue")) if n]
    if apart:
        shown[1] += f" (of them, {', '.join(apart)})"
    # A name with a newline or a terminal escape is shown quoted, as the run shows it: raw, it broke the listing.
    lines = [f"{status.name if status.name.isprintable() else repr(status.name)}  ({goal})", f"  trials: {sum(status.counts.values())}: {', '.join(shown)}"]
    if not status.best:
        lines.append(f"  best: none yet ({status.no_best or 'none has completed yet'})")
    elif len(status.objectives) == 1:
        number, values = status.best[0]
        lines.append(f"  best: trial {number}  {_values(values)}")
    else:
        lines.append(f"  Pareto front: {len(status.best)} trial{'s' * (len(status.best) != 1)}")
        lines += [f"    trial {number}  {_values(values)}" for number, values in status.best]
    if status.data is not None:  # what a run on another machine passes to resume or extend it
        lines.append(f"  data: {status.data}")
    if status.host_limited:
        lines.append(f"  host-limited: {trials_text(status.host_limited)} (the device waited for the executor; speed not the precision's)")
    if status.cpu_contended:
        lines.append(f"  CPU-contended: {trials_text(status.cpu_contended)} (other processes held the cores; speed not the precision's)")
    if status.majority_class:
        lines.append(f"  majority class: {trials_text(status.majority_class)} (predicted one class: learned nothing); {status.majority_class_hint}")
    if status.verdict:
        by_state = ", ".join(f"{state} {n}" for state, n in sorted(status.verdict.items()))
        lines.append(f"  verdict trials: {sum(status.verdict.values())}: {by_state} (not counted against --n-trials)")
    for run in status.running:
        beat = "no heartbeat" if run.since_heartbeat is None else f"last heartbeat {_ago(run.since_heartbeat)} ago"
        dead = "; its worker process is gone: the next run on this machine fails and re-queues it" if run.worker_gone else ""
        lines.append(f"  running: trial {run.number} on {run.worker}, for {_ago(run.running_for)}, {beat}{dead}")
    return lines
