"""The report's plot: a study's quality metric against training samples/s, one colour per precision."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import is_baseline, is_feasible, throughput_of
from hpo._files import write_whole
from hpo.reporting._report import StudyReport, metric_value, precision_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PRECISION_COLOURS = {"fp32": "tab:blue", "tf32": "tab:purple", "fp16": "tab:orange", "bf16": "tab:green"}


def _tradeoff_front(points: list[tuple[FrozenTrial, float, float]], maximize: bool) -> list[FrozenTrial]:
    """Trials no other trial beats on both throughput and the metric (for single-objective studies), among those that meet
    the space's constraints: a trial that breaks them is no trade-off on offer, as it is never the best."""
    sign = 1 if maximize else -1
    points = [(t, x, y) for t, x, y in points if is_feasible(t)]
    return [
        t for t, x, y in points
        if not any(x2 >= x and sign * y2 >= sign * y and (x2 > x or sign * y2 > sign * y) for _, x2, y2 in points)
    ]


def save_png(fig: Figure, path: Path, what: str) -> None:
    """``fig`` as a PNG at ``path``, whole or not at all (:func:`hpo._files.write_whole`: an ``OSError`` is one line)."""
    png = io.BytesIO()
    fig.savefig(png, format="png")
    write_whole(path, png.getvalue(), what)


def plot_tradeoff(report: StudyReport, path: Path) -> None:
    """``metric`` against training samples/s, one colour per precision, the front circled."""
    # Figure without pyplot: the Agg canvas, no global backend state, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    points = []
    for t in report.trials:
        x, y = throughput_of(t), metric_value(t, report.metric, report.objectives)
        if t.state == TrialState.COMPLETE and x is not None and y is not None:
            points.append((t, float(x), float(y)))
    for precision in [r.precision for r in report.rows]:
        mine = [(x, y) for t, x, y in points if precision_of(t) == precision]
        if mine:
            ax.scatter(*zip(*mine, strict=True), s=40, alpha=0.8, color=PRECISION_COLOURS.get(precision, "tab:gray"), label=precision)
    if len(report.objectives) > 1:
        front_ids, label = {t.number for t in report.front}, "Pareto front (all objectives)"
    else:
        front_ids = {t.number for t in _tradeoff_front(points, report.maximize_metric)}
        label = f"trade-off front ({report.metric} vs samples/s)"
    front = sorted(((x, y) for t, x, y in points if t.number in front_ids))
    if front:
        ax.scatter(*zip(*front, strict=True), s=140, facecolors="none", edgecolors="black", linewidths=1.5, label=label)
    baseline = [(x, y) for t, x, y in points if is_baseline(t)]
    if baseline:
        ax.scatter(*zip(*baseline, strict=True), s=160, marker="*", color="black", label="fp32 baseline")
    if not points:
        ax.text(0.5, 0.5, "no completed trials yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("training samples/s")
    # Names as given: a "$" in a study's name is no mathtext (an unpaired one raised a ValueError).
    ax.set_ylabel(report.metric, parse_math=False)
    ax.set_title(f"{report.study_name}: {report.metric} vs throughput by precision", parse_math=False)
    ax.grid(alpha=0.3)
    if points:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    save_png(fig, path, "the plot")
