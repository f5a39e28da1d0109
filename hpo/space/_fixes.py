"""``--fix NAME=VALUE``: searched parameters pinned for one run, read with each parameter's type."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hpo._errors import bounded_list, suggest_key
from hpo.space._params import CategoricalParam, FloatParam, IntParam, SearchSpaceError
from trial_executor import PRECISION_ALIASES, TrainConfig

if TYPE_CHECKING:
    from hpo.space._space import SearchSpace


def canonical_precision(value: Any) -> Any:
    """``fp32`` for its aliases (``none``, ``no``); anything else unchanged."""
    return PRECISION_ALIASES.get(value, value) if isinstance(value, str) else value


def parse_fixes(space: SearchSpace, items: list[str]) -> dict[str, Any]:
    """See :meth:`hpo.space._space.SearchSpace.parse_fixes`."""
    fixes: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name or not text:
            raise SearchSpaceError(f"--fix {item!r}: expected NAME=VALUE, e.g. --fix batch_size=16")
        if name not in space.params:
            if name in space.fixed:
                raise SearchSpaceError(f"--fix {name}: it is already fixed in the space (fixed.{name}); edit the space to change it")
            raise SearchSpaceError(f"--fix {name}: not a searched parameter of the space{suggest_key(name, list(space.params))}")
        value = _parse_value(name, space.params[name], text)
        try:
            TrainConfig(**{**space.fixed, name: value})
        except ValueError as err:
            raise SearchSpaceError(f"--fix {name}={text}: {err}") from None
        fixes[name] = value
    return fixes


def _parse_value(name: str, p: CategoricalParam | FloatParam | IntParam, text: str) -> Any:
    """``text`` read with the parameter's type and checked against its choices or range."""
    where = f"--fix {name}={text}"
    if isinstance(p, CategoricalParam):
        for choice in p.choices:
            if isinstance(choice, bool):
                matches = text.lower() == str(choice).lower()
            elif isinstance(choice, (int, float)):
                try:
                    matches = float(text) == choice
                except ValueError:
                    matches = False
            else:
                matches = text == choice or (name == "fp_precision" and canonical_precision(text) == canonical_precision(choice))
            if matches:
                return choice
        raise SearchSpaceError(f"{where}: not one of the choices [{bounded_list(map(repr, p.choices))}]")
    try:
        value: float = int(text) if isinstance(p, IntParam) else float(text)
    except ValueError:
        kind = "a whole number" if isinstance(p, IntParam) else "a number"
        raise SearchSpaceError(f"{where}: expected {kind}") from None
    if not (math.isfinite(value) and p.low <= value <= p.high):
        raise SearchSpaceError(f"{where}: outside the searched range [{p.low}, {p.high}]")
    if p.step and not math.isclose((value - p.low) / p.step, round((value - p.low) / p.step), abs_tol=1e-9):
        raise SearchSpaceError(f"{where}: not on the step grid (low {p.low}, step {p.step})")
    return value
