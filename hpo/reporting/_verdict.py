"""The precision verdict's table, lines and plot, from a study's verdict trials (see :mod:`hpo.study._verdict`).

Per precision, every column over the same seeds, those both it and fp32 completed (paired by
seed): steady-state samples/s and its ratio to fp32 (the geometric mean of the per-seed ratios,
with their range), peak memory and its ratio, the objective's mean, and the mean paired
difference to fp32 with a 95% t-interval. The
verdict is stored on the study (:data:`hpo._attrs.VERDICT_ATTR`), so that ``report``,
``export`` and the dashboard's study note show the same numbers.
"""

from __future__ import annotations

import contextlib
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import (
    MAJORITY_CLASS_HINT,
    PEAK_MEMORY_ATTR,
    SKIPPED_STEPS_ATTR,
    VERDICT_ATTR,
    hardware_of,
    is_cpu_contended,
    is_host_limited,
    is_majority_class,
    majority_class_hint,
    paid_first_use,
    ran_emulated,
    stored_verdict,
    throughput_of,
    verdict_trial_of,
)
from hpo._errors import UserError, bounded_list
from hpo._files import write_whole
from hpo._ranking import best_trials
from hpo.reporting._dashboard_view import save_note_quietly
from hpo.reporting._export import flatten
from hpo.reporting._numbers import trials_text
from hpo.reporting._report import _fmt, _objectives, _table, metric_value, outcome
from hpo.reporting._student_t import paired_interval
from hpo.reporting._tradeoff_plot import PRECISION_COLOURS, save_png
from hpo.space._measures import quality_objective
from hpo.study._outcomes import never_ran
from trial_executor import MINIMIZED_METRICS

CONFIDENCE = 0.95


@dataclass(frozen=True)
class PrecisionVerdict:
    """One precision of a verdict; ratios and differences are against fp32 with the same seed."""

    precision: str
    trials: dict[str, int]  # seed -> trial number (its last attempt)
    samples_per_s: float | None = None
    speed_ratio: float | None = None
    speed_ratio_range: list[float] = field(default_factory=list)
    peak_memory_mb: float | None = None
    memory_ratio: float | None = None
    objective_mean: float | None = None
    difference: float | None = None  # mean paired difference to fp32, in the verdict's unit
    interval: list[float] = field(default_factory=list)  # [low, high] at CONFIDENCE
    paired_seeds: int = 0
    skipped_steps: int | None = None
    host_limited: list[int] = field(default_factory=list)
    cpu_contended: list[int] = field(default_factory=list)  # its trials whose threads waited for cores others held
    not_completed: dict[str, int] = field(default_factory=dict)
    line: str = ""
    emulated: bool = False  # the CPU had no matmul instructions for this precision: autocast emulated it
    majority_class: list[int] = field(default_factory=list)  # its trials that predicted one class: they learned nothing
    learned_nothing: bool = False  # in every paired seed both it and fp32 learned nothing: no accuracy to compare


@dataclass(frozen=True)
class Verdict:
    """What each precision costs and buys for one configuration: stored on the study as a dict."""

    study: str
    source_trial: int
    metric: str
    unit: str  # "points" (the metric x 100) or the metric's own unit
    seeds: list[int]
    rows: list[PrecisionVerdict]
    unsupported: dict[str, str]
    devices: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, stored: dict[str, Any]) -> Verdict:
        return cls(**{**stored, "rows": [PrecisionVerdict(**row) for row in stored["rows"]]})


# Metrics a model that predicts one class for every row scores the same whatever its precision: for them, a
# seed where both precisions learned nothing compares nothing. The loss still differs, and is still compared.
DECIDED_BY_THE_PREDICTED_CLASS = ("accuracy", "macro_f1")


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _ratio_mean(ratios: list[float]) -> float | None:
    """Ratios average geometrically: 2x on one seed and 0.5x on another is 1x, not 1.25x."""
    return statistics.geometric_mean(ratios) if ratios else None


def _row(precision: str, mine: dict[int, FrozenTrial], fp32: dict[int, FrozenTrial], metric: str, scale: float,
         objectives: list[tuple[str, str]]) -> PrecisionVerdict:
    done = {s: t for s, t in mine.items() if t.state == TrialState.COMPLETE}
    paired = [s for s in sorted(done) if s in fp32 and fp32[s].state == TrialState.COMPLETE]
    both = {s: done[s] for s in paired}  # every column over these seeds, so that a row's columns agree
    speeds = {s: throughput_of(t) for s, t in both.items() if throughput_of(t)}
    ratios = [speeds[s] / throughput_of(fp32[s]) for s in speeds if throughput_of(fp32[s])]
    # Memory over the seeds where neither trial paid its process's first use (a verdict's first seed, in a fresh process).
    own = {s: t for s, t in both.items() if not (paid_first_use(t) or paid_first_use(fp32[s]))} or both
    memory = {s: t.user_attrs.get(PEAK_MEMORY_ATTR) for s, t in own.items() if t.user_attrs.get(PEAK_MEMORY_ATTR)}
    memory_ratios = [memory[s] / fp32[s].user_attrs[PEAK_MEMORY_ATTR] for s in memory if fp32[s].user_attrs.get(PEAK_MEMORY_ATTR)]
    values = {s: (metric_value(t, metric, objectives), metric_value(fp32[s], metric, objectives)) for s, t in both.items()}
    differences = [(value - reference) * scale for value, reference in values.values() if value is not None and reference is not None]
    interval = paired_interval(differences, CONFIDENCE)
    skipped = [t.user_attrs[SKIPPED_STEPS_ATTR] for t in both.values() if t.user_attrs.get(SKIPPED_STEPS_ATTR) is not None]
    return PrecisionVerdict(
        precision=precision, trials={str(s): t.number for s, t in sorted(mine.items())},
        samples_per_s=_mean(list(speeds.values())), speed_ratio=_ratio_mean(ratios),
        speed_ratio_range=[min(ratios), max(ratios)] if ratios else [], peak_memory_mb=_mean(list(memory.values())),
        memory_ratio=_ratio_mean(memory_ratios), objective_mean=_mean([v for v, _ in values.values() if v is not None]),
        difference=_mean(differences), interval=[interval[1], interval[2]] if interval else [], paired_seeds=len(paired),
        skipped_steps=sum(skipped) if skipped else None,
        host_limited=sorted(t.number for t in done.values() if is_host_limited(t)),
        cpu_contended=sorted(t.number for t in done.values() if is_cpu_contended(t)),
        emulated=any(ran_emulated(t, precision) for t in done.values()),
        majority_class=sorted(t.number for t in done.values() if is_majority_class(t)),
        learned_nothing=metric in DECIDED_BY_THE_PREDICTED_CLASS and bool(paired) and all(is_majority_class(done[s]) and is_majority_class(fp32[s]) for s in paired),
        not_completed=dict(Counter(outcome(t) for t in mine.values() if t.state != TrialState.COMPLETE)),
    )


def _latest_attempts(trials: list[FrozenTrial]) -> dict[str, dict[int, FrozenTrial]]:
    """precision -> seed -> the trial that counts: the last attempt (a retry supersedes what it retried). A placeholder
    that never trained (a ``duplicate``, by construction the later copy of a queued trial; ``over_budget``) is no attempt."""
    found: dict[str, dict[int, FrozenTrial]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        marker = verdict_trial_of(t) or {}
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL) and not never_ran(t):
            found.setdefault(marker["precision"], {})[int(marker["seed"])] = t
    return found


def build_verdict(study: optuna.Study, source_trial: int, seeds: list[int], precisions: list[str],
                  unsupported: dict[str, str]) -> Verdict:
    """The verdict of ``source_trial`` from the study's finished verdict trials."""
    objectives, _ = _objectives(study)
    trials = [t for t in study.get_trials(deepcopy=False) if (verdict_trial_of(t) or {}).get("of_trial") == source_trial]
    # The report's: a throughput objective is no quality to compare (then the task's own metric, rmse on regression data).
    metric, direction = quality_objective(objectives, [t.user_attrs for t in trials])
    scale, unit = (100.0, "points") if direction == "maximize" and metric not in MINIMIZED_METRICS else (1.0, "")
    by_precision = _latest_attempts([t for t in trials if int(verdict_trial_of(t)["seed"]) in seeds])
    fp32 = by_precision.get("fp32", {})
    rows, hint = [], majority_class_hint(trials)  # they re-train one config: one learning rate
    for precision in precisions:
        row = _row(precision, by_precision.get(precision, {}), fp32, metric, scale, objectives)
        rows.append(PrecisionVerdict(**{**asdict(row), "line": verdict_line(row, metric, unit, direction == "maximize", hint=hint)}))
    hardware = [hardware_of(t) for t in trials if hardware_of(t)]
    devices = sorted({f"{h.get('device_name')} ({h.get('device_type')}, torch {h.get('torch_version')})" for h in hardware})
    return Verdict(study.study_name, source_trial, metric, unit, list(seeds), rows, dict(unsupported), devices)


def _signed(value: float, unit: str) -> str:
    # Points (the metric x 100) read well at 2 decimals; a metric in its own unit (rmse on targets
    # of 1e-3, a loss) can differ in its fourth: 3 significant digits, never a "-0.00..+0.00".
    return f"{value:+.2f}" if unit == "points" else f"{value:+.3g}"


def verdict_line(row: PrecisionVerdict, metric: str, unit: str, higher_is_better: bool, *, hint: str = MAJORITY_CLASS_HINT) -> str:
    """One line: '<p>: 2.40x faster, 0.51x memory, accuracy -0.10 points (95% CI -0.60..+0.40): no measurable loss'.
    ``hint``: why its trials learned nothing, if they did (:func:`hpo._attrs.majority_class_hint`)."""
    if row.precision == "fp32":
        return "fp32: the reference" + _notes(row) + _caveats(row)
    if row.paired_seeds == 0:
        completed = len(row.trials) - sum(row.not_completed.values())  # seeds of its own whose fp32 trial did not complete
        ended = [*([f"{completed} completed where fp32 did not"] if completed else []),
                 *(f"{n} {k}" for k, n in sorted(row.not_completed.items()))]
        return f"{row.precision}: no seed completed alongside fp32 ({', '.join(ended) or 'no trial finished'}): no verdict"
    speed = "-" if row.speed_ratio is None else (
        f"{row.speed_ratio:.2f}x faster" if row.speed_ratio >= 1 else f"{1 / row.speed_ratio:.2f}x slower")
    memory = "" if row.memory_ratio is None else f", {row.memory_ratio:.2f}x memory"
    if row.difference is None:  # its trials, and fp32's, recorded no value of the metric
        return f"{row.precision}: {speed}{memory}; no {metric} recorded to compare" + _notes(row)
    change = f"{metric} {_signed(row.difference, unit)}{' ' + unit if unit else ''}"
    if row.learned_nothing:  # equal scores of models that learned nothing say nothing of the precision
        return (f"{row.precision}: {speed}{memory}; no verdict on {metric}: in every seed both {row.precision} and fp32 "
                f"learned nothing (majority class); {hint}") + _notes(row)
    if not row.interval:
        return f"{row.precision}: {speed}{memory}, {change} (one paired seed: no interval)" + _notes(row) + _caveats(row)
    low, high = row.interval
    worse, better = (high < 0, low > 0) if higher_is_better else (low > 0, high < 0)
    meaning = "loss" if worse else "gain" if better else "no measurable loss on this model and data"
    worst = -low if higher_is_better else high  # the largest loss the interval still allows
    if not (worse or better) and worst > 0:
        meaning += f" (a loss of up to {_signed(worst, unit)[1:]}{' ' + unit if unit else ''} is not ruled out: more seeds narrow it)"
    return f"{row.precision}: {speed}{memory}, {change} (95% CI {_signed(low, unit)}..{_signed(high, unit)}): {meaning}" + _notes(row) + _caveats(row)


def _notes(row: PrecisionVerdict) -> str:
    """What every line of a precision that ran says after its verdict: seeds not completed, and why its speed may mislead."""
    text = f"; not completed: {', '.join(f'{n} {k}' for k, n in sorted(row.not_completed.items()))}" if row.not_completed else ""
    if row.emulated:
        text += f" [{row.precision} emulated on this CPU (no native instructions for it): its speed is the emulation's]"
    if row.cpu_contended:
        text += f" [speed taken while other processes held the CPUs in {trials_text(row.cpu_contended)}]"
    return text + (f" [speed host-limited in {trials_text(row.host_limited)}]" if row.host_limited else "")


def _caveats(row: PrecisionVerdict) -> str:
    if not row.majority_class:
        return ""
    return f" [majority class (learned nothing) in {trials_text(row.majority_class)}]"


def verdict_table(verdict: Verdict) -> list[str]:
    """The verdict as Markdown lines: the table, then one line of verdict per precision."""
    unit = f" ({verdict.unit})" if verdict.unit else ""
    header = ["precision", "paired seeds (trials)", "samples/s", "speed vs fp32 (range)", "peak MB", "memory vs fp32",
              f"mean {verdict.metric}", f"diff to fp32{unit}", "95% CI", "fp16 skipped steps", "host-limited",
              "CPU-contended"]
    rows = []
    for r in verdict.rows:
        spread = f" ({r.speed_ratio_range[0]:.2f}..{r.speed_ratio_range[1]:.2f})" if r.speed_ratio_range else ""
        rows.append([
            r.precision, f"{r.paired_seeds} of {len(verdict.seeds)} ({', '.join(map(str, r.trials.values()))})", _fmt(r.samples_per_s),
            f"{r.speed_ratio:.2f}x{spread}" if r.speed_ratio is not None else "-", _fmt(r.peak_memory_mb),
            f"{r.memory_ratio:.2f}x" if r.memory_ratio is not None else "-", _fmt(r.objective_mean),
            "-" if r.precision == "fp32" or r.difference is None else _signed(r.difference, verdict.unit),
            f"{_signed(r.interval[0], verdict.unit)}..{_signed(r.interval[1], verdict.unit)}" if r.interval and r.precision != "fp32" else "-",
            _fmt(r.skipped_steps) if r.precision == "fp16" else "-", ", ".join(map(str, r.host_limited)) or "no",
            ", ".join(map(str, r.cpu_contended)) or "no",
        ])
    rows += [[p, "not run", *(["-"] * 9), f"unsupported here: {why}"] for p, why in verdict.unsupported.items()]
    lines = [*(f"- {r.line}" for r in verdict.rows), *(f"- {p}: not run: {why}" for p, why in verdict.unsupported.items())]
    return [*_table(header, rows), "", *lines]


def verdict_markdown(verdict: Verdict, plot_name: str | None = None) -> str:
    """The verdict section: what was re-trained, the table, how to read the intervals, the plot."""
    head = [
        f"## Precision verdict: trial {verdict.source_trial} re-trained with seeds {', '.join(map(str, verdict.seeds))}", "",
        f"Hardware: {'; '.join(verdict.devices) or 'unknown'}.", "", *verdict_table(verdict), "",
        "Each precision ran with the same seeds as fp32 (same data order, same initial head); `diff to fp32` is the mean "
        "over seeds of (precision - fp32) with the same seed, and `95% CI` its t-interval over those paired differences. "
        "An interval that contains 0 means the seeds cannot tell the precision from fp32; it narrows with more seeds "
        "(`--seeds`). Every column of a row is over its paired seeds; speed and memory ratios are per seed against fp32's, "
        "averaged geometrically; host-limited trials waited for the host, and CPU-contended trials for cores other "
        "processes held, so their speed says little about the precision.",
    ]
    return "\n".join([*head, *(["", f"![verdict]({plot_name})"] if plot_name else []), ""])


def other_best(study: optuna.Study, verdict: Verdict) -> str | None:
    """A line when the study's best trial (with several objectives: its Pareto front) no longer holds the trial the stored
    verdict re-trained (more trials found a better one, or the verdict was of ``--trial N``); ``None`` when it does."""
    best = best_trials(study)
    if not best or verdict.source_trial in [t.number for t in (best if len(study.directions) > 1 else best[:1])]:
        return None
    if len(study.directions) > 1:
        return (f"This verdict is of trial {verdict.source_trial}, no longer on the study's Pareto front (trials "
                f"{bounded_list(str(t.number) for t in best)}); `python -m hpo verdict --study-name {study.study_name} "
                "--trial N` makes the verdict of one of them.")
    return (f"This verdict is of trial {verdict.source_trial}; the study's best is now trial {best[0].number} "
            f"(`python -m hpo verdict --study-name {study.study_name}` makes its verdict).")


def store_verdict(study: optuna.Study, verdict: Verdict) -> None:
    """The verdict on the study (one user attr) and as the study's note in optuna-dashboard."""
    study.set_user_attr(VERDICT_ATTR, verdict.to_dict())
    save_note_quietly(study, verdict_markdown(verdict))


def verdict_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """The stored verdict as flat rows for ``export --verdict``: one per precision, unsupported ones included."""
    stored = stored_verdict(study)
    if not stored:
        raise UserError(f"study {study.study_name!r} has no verdict yet; compute it with `python -m hpo verdict --study-name {study.study_name}`")
    verdict = Verdict.from_dict(stored)
    common = {"study": verdict.study, "source_trial": verdict.source_trial, "metric": verdict.metric, "unit": verdict.unit,
              "seeds": verdict.seeds, "devices": verdict.devices}
    rows = [{**common, "run": True, **flatten(asdict(row))} for row in verdict.rows]
    return rows + [{**common, "precision": p, "run": False, "line": f"{p}: not run: {why}"} for p, why in verdict.unsupported.items()]


VERDICT_MD, VERDICT_PNG = "verdict.md", "verdict.png"


@contextlib.contextmanager
def verdict_out(out: Path) -> Iterator[Path]:
    """``out``, made before the verdict trains (a bad ``--out`` is refused before a trial is written); removed again if
    made here and left empty (the verdict failed or was stopped)."""
    made = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create --out directory {out}: {err.strerror}; pass a directory that can be made there") from None
    try:
        yield out
    finally:
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()


def write_verdict(verdict: Verdict, out: Path) -> str:
    """Write ``verdict.png`` and ``verdict.md`` into ``out`` (made by :func:`verdict_out`); return what to print (the table and
    where they went). A file that cannot be written is a :class:`UserError`."""
    plot_verdict(verdict, out / VERDICT_PNG)  # first: a verdict.md is never left pointing at a plot that could not be written
    write_whole(out / VERDICT_MD, f"# Precision verdict: {verdict.study}\n\n" + verdict_markdown(verdict, VERDICT_PNG), "the verdict")
    return "\n".join(["", *verdict_table(verdict), "", f"Wrote {out / VERDICT_MD} and {out / VERDICT_PNG}"])


def plot_verdict(verdict: Verdict, path: Path) -> None:
    """Two panels per precision: speed ratio to fp32 (range over seeds), and the paired difference with its 95% CI."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.8), dpi=120)
    FigureCanvasAgg(fig)
    speed_ax, diff_ax = fig.subplots(1, 2)
    rows = [r for r in verdict.rows if r.speed_ratio is not None or r.difference is not None]
    for y, r in enumerate(rows):
        colour = PRECISION_COLOURS.get(r.precision, "tab:gray")  # the report's colours, in both panels
        if r.speed_ratio is not None:
            low, high = r.speed_ratio_range or [r.speed_ratio, r.speed_ratio]
            speed_ax.errorbar(r.speed_ratio, y, xerr=[[r.speed_ratio - low], [high - r.speed_ratio]], fmt="o", capsize=4, color=colour)
        if r.difference is not None and r.precision != "fp32":
            low, high = r.interval or [r.difference, r.difference]
            diff_ax.errorbar(r.difference, y, xerr=[[r.difference - low], [high - r.difference]], fmt="o", capsize=4, color=colour)
    for ax, x, label in ((speed_ax, 1.0, "samples/s vs fp32 (x)"), (diff_ax, 0.0, f"{verdict.metric} - fp32 {verdict.unit} (95% CI)")):
        ax.axvline(x, color="grey", linestyle="--", linewidth=1)
        ax.set_yticks(range(len(rows)), [r.precision for r in rows])
        ax.set_xlabel(label, parse_math=False)
        ax.grid(alpha=0.3)
    # The study's name as given: a "$" in it is no mathtext.
    fig.suptitle(f"{verdict.study}: precision verdict of trial {verdict.source_trial} ({len(verdict.seeds)} seeds)", parse_math=False)
    fig.tight_layout()
    save_png(fig, path, "the verdict's plot")
