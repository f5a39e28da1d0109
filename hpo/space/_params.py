"""A space's searched parameters (categorical, float, int) and the error a malformed space raises."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator

from hpo._errors import UserError, bounded_list
from hpo.space._measures import Strict


class SearchSpaceError(UserError):
    """The search-space file is malformed or names something that cannot run."""


Choice = str | int | float | bool
# Set per run or per trial from the command line, never searched or fixed in a space.
RESERVED_KEYS = {"seed": "--seed", "device": "--device", "cache_dir": "--cache-dir"}


class _Membership(Strict):
    """What every param type answers: whether a value is one it can sample, and if not, why (the one rule)."""

    def problem_with(self, value: Any, *, within: str = "") -> str | None:
        """Why ``value`` is not a value of this param, as a phrase starting with ``is``; ``None`` when it is.

        ``within`` names a numeric param's range in the phrase (``"is outside the space's range [1, 8]"``).
        """
        raise NotImplementedError

    def contains(self, value: Any) -> bool:
        return self.problem_with(value) is None


class _NumericRange(_Membership):
    @field_validator("low", "high", "step", "default", mode="before", check_fields=False)
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        # pydantic's lax mode takes YAML's `true` as 1 and a quoted "8" as 8: neither is a bound anyone writes on purpose.
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"must be a number, got {value!r}")
        return value

    def problem_with(self, value: Any, *, within: str = "") -> str | None:
        return _range_problem(self, value, within)  # type: ignore[arg-type]  # FloatParam and IntParam only


class CategoricalParam(_Membership):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1)
    default: Choice | None = None

    def default_value(self) -> Choice:
        """``default`` as the matching choice itself (its exact type), else the first choice."""
        if self.default is None:
            return self.choices[0]
        return next(c for c in self.choices if same_choice(c, self.default))

    def problem_with(self, value: Any, *, within: str = "") -> str | None:
        if any(same_choice(c, value) for c in self.choices):
            return None
        return f"is not one of the choices [{bounded_list(map(repr, self.choices))}]"

    def describe(self) -> str:
        return f"choices {self.choices}"


def same_choice(a: Choice, b: Choice) -> bool:
    # True == 1 in Python; a bool default must not select an int choice, nor the reverse.
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _range_problem(p: FloatParam | IntParam, value: Any, within: str) -> str | None:
    """The one membership rule of a numeric param: a finite number (whole for ints), in range, on the step grid.

    The phrase starts with ``is``; ``within`` names the range in it (``"is outside the space's range [1, 8]"``).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "is not a finite number"
    if isinstance(p, IntParam) and not float(value).is_integer():
        return "is not a whole number"
    if not p.low <= value <= p.high:
        return " ".join(filter(None, ("is outside", within, f"[{p.low}, {p.high}]")))
    if p.step and not math.isclose((value - p.low) / p.step, round((value - p.low) / p.step), abs_tol=1e-9):
        return f"is not on the step grid (low {p.low}, step {p.step})"
    return None


class FloatParam(_NumericRange):
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

    def describe(self) -> str:
        return f"range [{self.low}, {self.high}]" + (f" (step {self.step})" if self.step else "")


class IntParam(_NumericRange):
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
        return self.low + math.floor((middle - self.low) / self.step + 0.5) * self.step  # high is on the grid (loading checks)

    def describe(self) -> str:
        return f"integer range [{self.low}, {self.high}]" + (f" (step {self.step})" if self.step > 1 else "")
