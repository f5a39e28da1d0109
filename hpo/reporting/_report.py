"""A study's precision report: per-precision outcomes, speedups against the fp32 baseline, the Pareto front."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import (
    CUDA_SETUP_MB,
    MEMORY_KEPT_REPORTED_MB,
    PEAK_MEMORY_ATTR,
    SKIP_REASON_ATTR,
    THROUGHPUT_ATTR,
    config_of,
    config_or_params,
    cuda_memory_not_released_mb,
    fail_reason_of,
    hardware_of,
    is_baseline,
    is_cpu_contended,
    is_feasible,
    is_host_limited,
    is_majority_class,
    is_verdict_trial,
    majority_class_hint,
    paid_first_use,
    ran_emulated,
    skip_reason_of,
    startup_seconds_of,
    stored_space,
    throughput_of,
    trials_per_gpu_of,
)
from hpo._ranking import best_trials
from hpo.reporting._numbers import number_text, trials_text
from hpo.space._fixes import canonical_precision
from hpo.space._measures import measured_value, quality_objective
from hpo.storage._inspect import objective_names
from hpo.study._outcomes import COUNTED_STATES, counted_state, never_ran
from trial_executor import CPU_CONTENDED_ABOVE, PRECISIONS

_DONE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
# Config fields that do not change how fast a training step runs (evaluation is not in throughput).
_SPEED_NEUTRAL = {
    "fp_precision", "learning_rate", "weight_decay", "warmup_ratio", "lr_schedule", "max_grad_norm", "seed",
    "epochs", "max_steps", "eval_every", "eval_every_samples", "eval_batch_size", "cache_dir", "device",
}


@dataclass(frozen=True)
class PrecisionRow:
    """One precision's trials: counts, the quality metric, speed, memory and how the rest ended."""

    precision: str
    trials: int
    completed: int
    best: float | None  # among the trials that meet the space's constraints
    median: float | None  # among every completed trial
    median_samples_per_s: float | None
    speedup: float | None
    matched_speedup: float | None
    matched_trials: int
    median_peak_memory_mb: float | None
    outcomes: dict[str, int]


@dataclass(frozen=True)
class StudyReport:
    """Everything the Markdown report, the table on stdout and the plot show."""

    study_name: str
    storage: str
    objectives: list[tuple[str, str]]
    constraints: dict[str, float]
    metric: str
    maximize_metric: bool
    states: dict[str, int]  # search trials by hpo.study._outcomes.counted_state
    devices: list[str]
    baseline: str
    rows: list[PrecisionRow]
    front: list[FrozenTrial]
    front_label: str
    trials: list[FrozenTrial]  # the search's: every trial but the verdict's
    verdict_trials: int = 0  # trials re-training the best configuration (the precision verdict), left out of the rest
    host_limited: list[int] = field(default_factory=list)  # trials whose device waited for the host
    majority_class: list[int] = field(default_factory=list)  # trials that never left the majority class
    shared_gpu: list[int] = field(default_factory=list)  # trials that shared their GPU with other trials
    cpu_contended: list[int] = field(default_factory=list)  # trials whose threads waited for cores other processes held
    memory_kept: dict[int, float] = field(default_factory=dict)  # trial -> CUDA MiB it left allocated
    emulated: list[int] = field(default_factory=list)  # trials whose precision their CPU emulated
    startup: tuple[int, float, float] | None = None  # trials with start-up steps timed apart, their seconds, all training seconds


def precision_of(trial: FrozenTrial) -> str:
    """The precision a trial was asked for (searched or fixed), ``unknown`` for studies made elsewhere."""
    config = config_of(trial)
    # A searched alias (none, no) is fp32: one row, one baseline, whatever the space called it.
    return str(canonical_precision(trial.params.get("fp_precision", config.get("fp_precision", "unknown"))))


def outcome(trial: FrozenTrial) -> str:
    """``complete``, a ``skip_reason``, ``pruned`` (by the pruner) or ``failed <ErrorType>``."""
    if trial.state == TrialState.COMPLETE:
        return "complete"
    if trial.state == TrialState.PRUNED:
        return skip_reason_of(trial) or "pruned"
    if trial.state == TrialState.FAIL:
        reason = fail_reason_of(trial)
        return f"failed {reason.split(':', 1)[0]}" if ":" in reason else "failed"
    return trial.state.name.lower()


def _measured(trial: FrozenTrial) -> bool:
    # Trials that trained in full or until the pruner stopped them; skipped ones measured nothing comparable,
    # nor did trials sharing a GPU with others (--gpus-per-trial 0.25, several --workers on one --gpus index)
    # or their CPUs with other processes (measured: the time its threads waited for a core).
    return trial.state in (TrialState.COMPLETE, TrialState.PRUNED) and SKIP_REASON_ATTR not in trial.user_attrs \
        and measured_value(trial.user_attrs, THROUGHPUT_ATTR) is not None and trials_per_gpu_of(trial) == 1 \
        and not is_cpu_contended(trial)


def _own_memory(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials whose peak memory is their configuration's (:func:`hpo._attrs.paid_first_use`); all where none is."""
    return [t for t in trials if not paid_first_use(t)] or trials


def _speed_key(trial: FrozenTrial) -> str:
    """Everything but precision that sets a step's speed: the machine, and the speed-relevant config."""
    config = config_or_params(trial)
    device = hardware_of(trial).get("device_name")
    return json.dumps([device, {k: v for k, v in config.items() if k not in _SPEED_NEUTRAL}], sort_keys=True)


def _matched_speedups(trials: list[FrozenTrial]) -> dict[int, float]:
    """Trial number -> its samples/s over the median fp32 trial's with the same speed key."""
    fp32: dict[str, list[float]] = {}
    for t in trials:
        if precision_of(t) == "fp32" and _measured(t):
            fp32.setdefault(_speed_key(t), []).append(throughput_of(t))
    return {
        t.number: throughput_of(t) / statistics.median(fp32[_speed_key(t)])
        for t in trials
        if _measured(t) and _speed_key(t) in fp32 and statistics.median(fp32[_speed_key(t)]) > 0
    }


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _objectives(study: optuna.Study) -> tuple[list[tuple[str, str]], dict[str, float]]:
    # The names every command gives the values (value_0... for a study this service did not create).
    directions = ["maximize" if d == StudyDirection.MAXIMIZE else "minimize" for d in study.directions]
    return list(zip(objective_names(study), directions, strict=True)), dict(stored_space(study).get("constraints") or {})


def metric_value(trial: FrozenTrial, name: str, objectives: list[tuple[str, str]]) -> float | None:
    names = [n for n, _ in objectives]
    if trial.state == TrialState.COMPLETE and name in names:
        return trial.values[names.index(name)]
    return measured_value(trial.user_attrs, name)


def _baseline(trials: list[FrozenTrial]) -> tuple[float | None, str]:
    marked = sorted((t for t in trials if is_baseline(t)), key=lambda t: t.number)  # the baseline and its retries
    measured = [t for t in marked if _measured(t)]
    if measured:
        base = measured[-1]
        speed = throughput_of(base)
        return speed, f"trial {base.number}, the enqueued fp32 baseline ({speed:.1f} samples/s)"
    why = _unmeasured_baseline(marked) if marked else "the study has no fp32 baseline trial"
    fp32 = [throughput_of(t) for t in trials if precision_of(t) == "fp32" and _measured(t)]
    if fp32:
        speed = statistics.median(fp32)
        return speed, f"the median of {len(fp32)} measured fp32 trials ({speed:.1f} samples/s), since {why}"
    return None, f"none: no fp32 trial was measured ({why})"


def _unmeasured_baseline(marked: list[FrozenTrial]) -> str:
    """Why the baseline's latest attempt (its retry, if its first failed; never a placeholder that did not train) gives no speed."""
    latest = ([t for t in marked if not never_ran(t)] or marked)[-1]
    retry = f" (the retry of trial {marked[0].number})" if latest is not marked[0] else ""
    if latest.state not in _DONE:
        return f"the fp32 baseline trial {latest.number}{retry} has not finished: it is {outcome(latest)}"
    how = "completed" if latest.state == TrialState.COMPLETE else f"ended {outcome(latest)}"
    if latest.state != TrialState.FAIL and skip_reason_of(latest) is None:  # it trained: said why its speed is not used
        how += (" while other processes held the CPUs (CPU-contended): its speed is partly theirs" if is_cpu_contended(latest)
                else " sharing its GPU with other trials: its speed is partly theirs" if trials_per_gpu_of(latest) > 1
                else " without a measured samples/s")
    return f"the fp32 baseline trial {latest.number}{retry} {how}"


def build_report(study: optuna.Study, storage_shown: str) -> StudyReport:
    """Summarise ``study``'s search by precision; ``storage_shown`` is the (masked) URL to print.

    Verdict trials (compared in the verdict's own table) are left out, except from the flags (host-limited...).
    """
    every = study.get_trials(deepcopy=False)
    done = [t for t in every if t.state in _DONE]
    trials = [t for t in done if not is_verdict_trial(t)]
    objectives, constraints = _objectives(study)
    metric, direction = quality_objective(objectives, [t.user_attrs for t in trials])
    maximize = direction == "maximize"
    base_speed, baseline = _baseline([t for t in every if not is_verdict_trial(t)])  # a baseline still waiting is named
    ran = [t for t in trials if not never_ran(t)]  # placeholders that never trained: "not run" in the summary, in no row
    matched = _matched_speedups(ran)
    found = {precision_of(t) for t in ran}
    order = [p for p in PRECISIONS if p in found] + sorted(found - set(PRECISIONS))
    rows = []
    for precision in order:
        mine = [t for t in ran if precision_of(t) == precision]
        complete = [t for t in mine if t.state == TrialState.COMPLETE]
        scores = [v for v in (metric_value(t, metric, objectives) for t in complete) if v is not None]
        feasible = [v for v in (metric_value(t, metric, objectives) for t in complete if is_feasible(t)) if v is not None]
        measured = [t for t in mine if _measured(t)]
        speed = _median([throughput_of(t) for t in measured])
        ratios = [matched[t.number] for t in measured if t.number in matched]
        rows.append(PrecisionRow(
            precision=precision, trials=len(mine), completed=len(complete),
            best=(max if maximize else min)(feasible) if feasible else None, median=statistics.median(scores) if scores else None,
            median_samples_per_s=speed,
            speedup=speed / base_speed if speed is not None and base_speed else None,
            matched_speedup=statistics.median(ratios) if ratios else None, matched_trials=len(ratios),
            median_peak_memory_mb=_median([t.user_attrs.get(PEAK_MEMORY_ATTR) for t in _own_memory(measured)]),
            outcomes=dict(Counter(outcome(t) for t in mine if t.state != TrialState.COMPLETE)),
        ))
    front_label = "Pareto front (no other feasible trial is at least as good in every objective)" if len(objectives) > 1 else "Best trial"
    devices = sorted({f"{h.get('device_name')} ({h.get('device_type')}, torch {h.get('torch_version')})" for h in map(hardware_of, done) if h})
    states = Counter(counted_state(t) for t in every if not is_verdict_trial(t))
    return StudyReport(
        study_name=study.study_name, storage=storage_shown, objectives=objectives, constraints=constraints,
        metric=metric, maximize_metric=maximize, states=dict(states), devices=devices, baseline=baseline,
        rows=rows, front=best_trials(study), front_label=front_label, trials=sorted(trials, key=lambda t: t.number),
        verdict_trials=len(every) - sum(states.values()), **_flags(sorted(done, key=lambda t: t.number)),
    )


def _flags(trials: list[FrozenTrial]) -> dict[str, Any]:
    """The trials whose figures need a caveat, by :class:`StudyReport` field."""
    return {
        "host_limited": [t.number for t in trials if is_host_limited(t)],
        "majority_class": [t.number for t in trials if is_majority_class(t)],
        "shared_gpu": [t.number for t in trials if trials_per_gpu_of(t) > 1],
        "cpu_contended": [t.number for t in trials if is_cpu_contended(t)],
        "emulated": [t.number for t in trials if ran_emulated(t, precision_of(t))],
        "memory_kept": {t.number: kept for t in trials if (kept := cuda_memory_not_released_mb(t)) is not None},
        "startup": _startup(trials),
    }


def _startup(trials: list[FrozenTrial]) -> tuple[int, float, float] | None:
    """Over the trials with start-up steps timed apart: how many, those steps' seconds, and all their training seconds."""
    timed = [s for s in map(startup_seconds_of, trials) if s is not None and s[0] > 0]
    return (len(timed), sum(s for s, _ in timed), sum(t for _, t in timed)) if timed else None


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return number_text(value)
    return str(value).replace("|", "\\|")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|", *("| " + " | ".join(r) + " |" for r in rows)]


def precision_table(report: StudyReport) -> list[str]:
    """The per-precision table, as Markdown lines."""
    header = [
        # The best of a precision is one it could be the study's best with: meeting the constraints, as the best must.
        "precision", "trials", "completed", f"best {'feasible ' * bool(report.constraints)}{report.metric}", f"median {report.metric}",
        "median samples/s",
        "speedup vs fp32", "matched speedup (trials)", "median peak MB", "not completed",
    ]
    rows = [
        [
            r.precision, str(r.trials), str(r.completed), _fmt(r.best), _fmt(r.median), _fmt(r.median_samples_per_s),
            f"{r.speedup:.2f}x" if r.speedup is not None else "-",
            f"{r.matched_speedup:.2f}x ({r.matched_trials})" if r.matched_speedup is not None else "-",
            _fmt(r.median_peak_memory_mb),
            ", ".join(f"{k}: {v}" for k, v in sorted(r.outcomes.items())) or "-",
        ]
        for r in report.rows
    ]
    return _table(header, rows)


def _params(trial: FrozenTrial) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in trial.params.items())


def front_table(report: StudyReport) -> list[str]:
    """The Pareto front (or best trial) with its objective values and params, as Markdown lines."""
    if not report.front:
        return ["No completed trial meets the constraints yet." if report.constraints else "No trial has completed yet."]
    names = [n for n, _ in report.objectives]
    extra = [m for m in ("throughput_samples_per_s", "peak_memory_mb") if m not in names]
    header = ["trial", *names, *extra, "params"]
    rows = [
        [str(t.number), *(_fmt(metric_value(t, n, report.objectives)) for n in [*names, *extra]), _params(t)]
        for t in report.front
    ]
    return _table(header, rows)


def _constraints(constraints: dict[str, float]) -> str:
    """As the space writes them: ``min_accuracy: 0.8, max_peak_memory_mb: 2000``."""
    return ", ".join(f"{key}: {number_text(float(limit))}" for key, limit in constraints.items())


def summary_lines(report: StudyReport) -> list[str]:
    objectives = ", ".join(f"{n} ({d})" for n, d in report.objectives)
    lines = [
        f"Study {report.study_name!r} in {report.storage}",
        f"Objectives: {objectives}" + (f"; constraints: {_constraints(report.constraints)}" if report.constraints else ""),
        "Trials: " + (", ".join(f"{report.states[s]} {words}" for s, words in COUNTED_STATES.items() if report.states.get(s)) or "none yet")
        + (f"; {report.verdict_trials} verdict trials (the precision verdict's, left out here)" if report.verdict_trials else ""),
        f"Speedups are against {report.baseline}.",
    ]
    if report.devices:
        lines.append("Hardware: " + "; ".join(report.devices))
    if report.host_limited:
        lines.append(
            f"Host-limited trials (the device waited for the executor, so their speed says little about their precision): "
            f"{trials_text(report.host_limited)}."
        )
    if report.majority_class:
        lines.append(
            f"Majority-class trials (predicted one class, or scored exactly the majority share: they learned nothing, "
            f"so their precision's accuracy says nothing): {trials_text(report.majority_class)}; "
            f"{majority_class_hint(t for t in report.trials if t.number in report.majority_class)}."
        )
    if report.shared_gpu:
        lines.append(
            "Shared-GPU trials (their throughput was taken while other trials used the same GPU: left out of every "
            f"speed and speedup here): {trials_text(report.shared_gpu)}."
        )
    if report.cpu_contended:
        lines.append(
            f"CPU-contended trials (their threads waited for a core over {CPU_CONTENDED_ABOVE:.0%} of the time they were "
            "ready to run: other processes held the machine's cores, so their throughput is partly those processes'; left "
            f"out of every speed and speedup here): {trials_text(report.cpu_contended)}."
        )
    if report.emulated:
        lines.append(
            "Emulated-precision trials (their CPU has no matmul instructions for their precision, so autocast emulated it: "
            f"their speed is the emulation's, not the precision's): {trials_text(report.emulated)}."
        )
    if report.startup:
        n, startup, train = report.startup
        lines.append(f"Start-up (the first steps of each new batch shape: compiling, CUDA-graph capture, kernel selection): "
                     f"{startup:.0f} s of the {train:.0f} s that {n} trial{'s' if n > 1 else ''} trained ({startup / train:.0%}); "
                     "samples/s and speedups here leave it out, a wall clock does not.")
    if report.memory_kept:
        kept = ", ".join(f"{n} (+{mb:.0f} MiB)" for n, mb in report.memory_kept.items())
        lines.append(f"Memory not released (CUDA memory still allocated after the trial, over {MEMORY_KEPT_REPORTED_MB:.0f} MiB "
                     f"above its start, {MEMORY_KEPT_REPORTED_MB + CUDA_SETUP_MB:.0f} MiB for a worker's first CUDA trial, which "
                     f"also sets up cuBLAS: the next trial started that much fuller): {kept}.")
    return lines


def markdown(report: StudyReport, plot_name: str) -> str:
    """The full ``report.md``."""
    lines = [f"# Precision report: {report.study_name}", "", *(f"- {line}" for line in summary_lines(report)), ""]
    lines += ["## By precision", "", *precision_table(report), ""]
    lines += [
        "Medians of samples/s and peak memory are over trials that trained (complete, or stopped by the pruner); "
        "they mix batch sizes and models, and so does `speedup vs fp32`. `matched speedup` compares each trial "
        "only with fp32 trials on the same device with the same speed-relevant settings (batch size, model, "
        "max_length, ...; not learning rate or schedule): the median ratio, and how many trials had such a match. "
        "`not completed` counts skip reasons (`unsupported_precision`, `non_finite_loss`, `oom`), "
        "`pruned` (stopped by the pruner) and `failed <error type>`; placeholders that never trained (`not run` above: "
        "`over_budget`, `duplicate`) are in no row.",
        "",
        f"## {report.front_label}", "", *front_table(report), "",
        f"![{report.metric} vs samples/s]({plot_name})", "",
        "## All trials", "",
    ]
    header = ["trial", "state", "outcome", "precision", report.metric, "samples/s", "peak MB", "params"]
    rows = [
        [
            str(t.number) + (" (fp32 baseline)" if is_baseline(t) else ""), t.state.name,
            outcome(t) + (" (majority class)" if is_majority_class(t) else ""),
            _fmt(precision_of(t)), _fmt(metric_value(t, report.metric, report.objectives)),
            _fmt(throughput_of(t)), _fmt(t.user_attrs.get(PEAK_MEMORY_ATTR)), _params(t),
        ]
        for t in report.trials
    ]
    return "\n".join([*lines, *_table(header, rows), ""])
