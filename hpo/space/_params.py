"""A space's searched parameters (categorical, float, int) and the error a malformed space raises."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from hpo._errors import UserError
from hpo.space._measures import Strict


class SearchSpaceError(UserError):
    """The search-space file is malformed or names something that cannot run."""


Choice = str | int | float | bool


class CategoricalParam(Strict):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1)
    default: Choice | None = None

    def default_value(self) -> Choice:
        """``default`` as the matching choice itself (its exact type), else the first choice."""
        if self.default is None:
            return self.choices[0]
        return next(c for c in self.choices if same_choice(c, self.default))

    def contains(self, value: Any) -> bool:
        return any(same_choice(c, value) for c in self.choices)

    def describe(self) -> str:
        return f"choices {self.choices}"


def same_choice(a: Choice, b: Choice) -> bool:
    # True == 1 in Python; a bool default must not select an int choice, nor the reverse.
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _in_range(p: FloatParam | IntParam, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if not p.low <= value <= p.high:
        return False
    return not p.step or math.isclose((value - p.low) / p.step, round((value - p.low) / p.step), abs_tol=1e-9)


class FloatParam(Strict):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(default=None, gt=0)
    default: float | None = None

    def default_value(self) -> float:
        """``default``, else the geometric midpoint (log scale) or the midpoint, on the step grid."""
        if self.default is not None:
            return self.default
        if self.log:
            value = math.sqrt(self.low * self.high)
        elif self.step:
            value = self.low + math.floor((self.high - self.low) / 2 / self.step + 0.5) * self.step
        else:
            value = (self.low + self.high) / 2
        return min(max(value, self.low), self.high)

    def contains(self, value: Any) -> bool:
        return _in_range(self, value)

    def describe(self) -> str:
        return f"range [{self.low}, {self.high}]" + (f" (step {self.step})" if self.step else "")


class IntParam(Strict):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = Field(default=1, ge=1)
    default: int | None = None

    def default_value(self) -> int:
        """``default``, else the (geometric, for log scale) midpoint rounded half up onto the step grid."""
        if self.default is not None:
            return self.default
        middle = math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2
        value = self.low + math.floor((middle - self.low) / self.step + 0.5) * self.step
        # Rounding up can leave the grid's last point when high is not on it.
        while value > self.high:
            value -= self.step
        return max(value, self.low)

    def contains(self, value: Any) -> bool:
        return isinstance(value, int) and _in_range(self, value)

    def describe(self) -> str:
        return f"integer range [{self.low}, {self.high}]" + (f" (step {self.step})" if self.step > 1 else "")
