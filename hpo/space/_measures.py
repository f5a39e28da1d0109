"""What a study optimises and constrains: the measures a trial records, and how to read them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from hpo._attrs import METRICS_ATTR
from trial_executor import METRICS, MINIMIZED_METRICS, TASK_METRICS

# What a trial measures besides the evaluation metrics; each can be an objective or a constraint.
MEASUREMENTS: tuple[str, ...] = ("throughput_samples_per_s", "throughput_tokens_per_s", "peak_memory_mb")
OBJECTIVE_NAMES: tuple[str, ...] = (*METRICS, *MEASUREMENTS)
CONSTRAINT_KEYS: tuple[str, ...] = tuple(f"{bound}_{name}" for name in OBJECTIVE_NAMES for bound in ("max", "min"))
_MINIMIZED = {*MINIMIZED_METRICS, "peak_memory_mb"}
# The values each measure can take (None: unbounded): a constraint outside them is never met.
# Shares (accuracy, F1) are fractions, never percentages; every measure not listed is at least 0.
MEASURE_RANGES: dict[str, tuple[float, float | None]] = {
    **{name: (0.0, None) for name in OBJECTIVE_NAMES},
    **{name: (0.0, 1.0) for name in ("accuracy", "macro_f1", "micro_f1", "subset_accuracy")},
    **{name: (-1.0, 1.0) for name in ("pearson", "spearman")},
}

Direction = Literal["maximize", "minimize"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def quality_objective(objectives: list[tuple[str, str]], recorded: Iterable[Mapping[str, Any]] = ()) -> tuple[str, str]:
    """The objective a study's quality is judged on, and its direction, from its ``(name, direction)`` objectives: the
    first evaluation metric, else the first that is not a speed or memory measurement (the unnamed values of a study
    made elsewhere), else the first metric of the task the trials measured (their ``recorded`` user attrs: ``rmse`` on
    regression data, ``micro_f1`` on multi-label data; accuracy, which every classification trial records, when none
    did), in its natural direction."""
    quality = [(n, d) for n, d in objectives if n in METRICS] + [(n, d) for n, d in objectives if n not in OBJECTIVE_NAMES]
    if quality:
        return quality[0]
    measured = {name for attrs in recorded for name in attrs.get(METRICS_ATTR) or {}}
    first = next((names[0] for names in TASK_METRICS.values() if names[0] in measured), "accuracy")
    return first, natural_direction(first)


def natural_direction(name: str) -> Direction:
    """How a measure is best optimised: loss, rmse and peak memory down, the rest up."""
    return "minimize" if name in _MINIMIZED else "maximize"


class Objective(Strict):
    """The single-objective form: ``objective: {metric: accuracy, direction: maximize}``.

    ``direction`` defaults to the metric's natural one (``rmse``, ``loss``: minimize).
    """

    metric: str = "accuracy"
    direction: Direction = "maximize"

    @model_validator(mode="before")
    @classmethod
    def _natural_direction(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("direction") is None and isinstance(data.get("metric", "accuracy"), str):
            return {**data, "direction": natural_direction(data.get("metric", "accuracy"))}
        return data


class NamedObjective(Strict):
    """One entry of ``objectives:``; ``direction`` defaults to the measure's natural one."""

    name: str
    direction: Direction

    @model_validator(mode="before")
    @classmethod
    def _natural_direction(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("direction") is None and isinstance(data.get("name"), str):
            return {**data, "direction": natural_direction(data["name"])}
        return data


def measured_value(user_attrs: Mapping[str, Any], name: str) -> float | None:
    """A trial's recorded value of ``name`` (final evaluation metric or measurement), if any."""
    if name in MEASUREMENTS:
        return user_attrs.get(name)
    return user_attrs.get(METRICS_ATTR, {}).get(name)


def constraint_violation(key: str, limit: float, value: float) -> float:
    """Optuna's convention: <= 0 satisfies ``max_<measure>: limit`` / ``min_<measure>: limit``."""
    return value - limit if key.startswith("max_") else limit - value


def constraint_measure(key: str) -> str:
    """``max_peak_memory_mb`` -> ``peak_memory_mb``."""
    return key.split("_", 1)[1]


def unmeetable_constraint(constraints: Mapping[str, float]) -> str | None:
    """Why no trial can meet ``constraints`` (a limit outside its measure's range, or a minimum above its maximum), if so."""
    for key, limit in constraints.items():
        name = constraint_measure(key)
        low, high = MEASURE_RANGES.get(name, (None, None))
        if key.startswith("min_") and high is not None and limit > high:
            share = f" (a fraction: {limit / 100:g} for {limit:g}%)" if high == 1.0 and float(limit).is_integer() and 1 < limit <= 100 else ""
            return f"constraints.{key}: {limit:g} can never be met: {name} is at most {high:g}{share}; lower it"
        if key.startswith("max_") and low is not None and limit < low:
            return f"constraints.{key}: {limit:g} can never be met: {name} is never below {low:g}; raise it"
        ceiling = constraints.get(f"max_{name}")
        if key.startswith("min_") and ceiling is not None and limit > ceiling:
            return (f"constraints: min_{name} ({limit:g}) is above max_{name} ({ceiling:g}): no trial can meet both; "
                    f"lower min_{name} or raise max_{name}")
    return None
