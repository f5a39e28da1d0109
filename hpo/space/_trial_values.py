"""Values a trial was given rather than sampled (``enqueue_trial``), checked against the search space.

Optuna runs an enqueued value outside a parameter's distribution with only a warning; a
study must never silently train what its space does not allow, so such a trial fails with a
``fail_reason`` that names the value and the fix.
"""

from __future__ import annotations

import math
from typing import Any

from hpo._errors import bounded_list
from hpo.space._params import CategoricalParam, FloatParam, IntParam, same_choice
from hpo.space._space import SearchSpace

_FIX = "enqueue values the space can sample, or widen the space"


class InvalidTrialError(ValueError):
    """A trial's values cannot make a valid run: outside the space, or an invalid executor config."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _problem(name: str, p: CategoricalParam | FloatParam | IntParam, value: Any) -> str | None:
    if isinstance(p, CategoricalParam):
        return None if any(same_choice(c, value) for c in p.choices) else f"{name}={value!r} is not one of the choices [{bounded_list(map(repr, p.choices))}]"
    if not _is_number(value) or not math.isfinite(value):
        return f"{name}={value!r} is not a finite number"
    if isinstance(p, IntParam) and not float(value).is_integer():
        return f"{name}={value!r} is not a whole number"
    if not p.low <= value <= p.high:
        return f"{name}={value!r} is outside the space's range [{p.low}, {p.high}]"
    if p.step and not math.isclose((value - p.low) / p.step, round((value - p.low) / p.step), abs_tol=1e-9):
        return f"{name}={value!r} is not on the step grid (low {p.low}, step {p.step})"
    return None


def check_enqueued(space: SearchSpace, enqueued: dict[str, Any]) -> None:
    """Raise :class:`InvalidTrialError` naming the first enqueued value ``space`` cannot sample."""
    for name, value in enqueued.items():
        param = space.params.get(name)
        if param is None:
            raise InvalidTrialError(f"enqueued parameter {name!r} is not searched by the space (it searches {bounded_list(space.params)}); {_FIX}")
        problem = _problem(name, param, value)
        if problem:
            raise InvalidTrialError(f"enqueued {problem}; {_FIX}")
