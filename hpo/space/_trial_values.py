"""Values a trial was given rather than sampled (``enqueue_trial``), checked against the search space.

Optuna runs an enqueued value outside a parameter's distribution with only a warning; a
study must never silently train what its space does not allow, so such a trial fails with a
``fail_reason`` that names the value and the fix.
"""

from __future__ import annotations

from typing import Any

from hpo._errors import bounded_list
from hpo.space._space import SearchSpace

_FIX = "enqueue values the space can sample, or widen the space"


class InvalidTrialError(ValueError):
    """A trial's values cannot make a valid run: outside the space, or an invalid executor config."""


def check_enqueued(space: SearchSpace, enqueued: dict[str, Any]) -> None:
    """Raise :class:`InvalidTrialError` naming the first enqueued value ``space`` cannot sample."""
    for name, value in enqueued.items():
        param = space.params.get(name)
        if param is None:
            raise InvalidTrialError(f"enqueued parameter {name!r} is not searched by the space (it searches {bounded_list(space.params)}); {_FIX}")
        problem = param.problem_with(value, within="the space's range")
        if problem:
            raise InvalidTrialError(f"enqueued {name}={value!r} {problem}; {_FIX}")
