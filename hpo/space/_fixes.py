"""``--fix NAME=VALUE``: searched parameters pinned for one run, read with each parameter's type."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpo._errors import suggest_key
from hpo.space._params import RESERVED_KEYS, CategoricalParam, FloatParam, IntParam, SearchSpaceError, same_choice
from trial_executor import PRECISION_ALIASES, TrainConfig

if TYPE_CHECKING:
    from hpo.space._space import SearchSpace


def canonical_precision(value: Any) -> Any:
    """``fp32`` for its aliases (``none``, ``no``); anything else unchanged."""
    return PRECISION_ALIASES.get(value, value) if isinstance(value, str) else value


def same_value(name: str, a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are one value of parameter ``name`` (``fp_precision``: fp32 under any of its names;
    ``model``: one local directory however its path is written, ``./my-bert`` or ``my-bert``)."""
    if a == b or (name == "fp_precision" and canonical_precision(a) == canonical_precision(b)):
        return True
    return name == "model" and (directory := local_directory(a)) is not None and directory == local_directory(b)


def local_directory(model: Any) -> str | None:
    """The absolute path of the local directory model name ``model`` names (see
    :func:`trial_executor.model.local_model_directory`); ``None`` else, without importing torch for a hub id or preset."""
    if not isinstance(model, str) or not Path(model).expanduser().is_dir():
        return None
    from trial_executor.model import local_model_directory

    return local_model_directory(model)


def same_choice_of(name: str, choice: Any, value: Any) -> bool:
    """Whether ``value`` is ``choice`` of parameter ``name``: equal and of one type (``True`` is no ``1``), or fp32 under
    another of its names (``fp_precision``'s ``none``, ``no``)."""
    return same_choice(choice, value) or (isinstance(choice, str) and same_value(name, choice, value))


def as_choice(name: str, param: CategoricalParam | FloatParam | IntParam, value: Any) -> Any:
    """``value`` as ``param``'s own choice (fp32 under the name the space lists it by); else ``value`` unchanged."""
    if not isinstance(param, CategoricalParam):
        return value
    return next((choice for choice in param.choices if same_choice_of(name, choice, value)), value)


def parse_fixes(space: SearchSpace, items: list[str]) -> dict[str, Any]:
    """See :meth:`hpo.space._space.SearchSpace.parse_fixes`."""
    fixes: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name or not text:
            raise SearchSpaceError(f"--fix {item!r}: expected NAME=VALUE, e.g. --fix batch_size=16")
        flag = _flag(name)
        if name not in space.params:
            if name in space.fixed:
                # A fixed value is part of what the study's trials mean: another one is another study.
                raise SearchSpaceError(
                    f"{flag}: it is already fixed in the space (fixed.{name}: {space.fixed[name]!r}); to change it, "
                    f"copy the space's YAML, edit fixed.{name} and pass the copy with --space and a new --study-name"
                )
            raise SearchSpaceError(_not_searched(space, name))
        value = _parse_value(name, space.params[name], text)
        try:
            TrainConfig(**{**space.fixed, name: value})
        except ValueError as err:
            raise SearchSpaceError(f"{_flag(name, text)}: {err}") from None
        if name in fixes and fixes[name] != value:  # the last one winning would silently drop the other
            raise SearchSpaceError(f"{flag} is given two values, {fixes[name]!r} and {value!r}; keep one")
        fixes[name] = value
    return fixes


def _not_searched(space: SearchSpace, name: str) -> str:
    """Why ``--fix NAME`` names nothing the space searches: a run flag, a setting the space leaves at its default, or a typo."""
    flag = _flag(name)
    if name in RESERVED_KEYS:
        return f"{flag}: set per run: pass {RESERVED_KEYS[name]} instead"
    if name in TrainConfig.field_names():  # --fix pins a searched value; the rest of a trial's config is the space's
        return (f"{flag}: not searched by the space, which leaves it at its default ({name}: {TrainConfig.defaults()[name]!r}); "
                f"to set it, copy the space's YAML, add fixed.{name} and pass the copy with --space and a new --study-name")
    return f"{flag}: not a searched parameter of the space{suggest_key(name, list(space.params))}"


def _matches(name: str, choice: Any, text: str) -> bool:
    """Whether ``--fix`` text names ``choice``: read as the choice's type (``fp_precision`` aliases match too)."""
    if isinstance(choice, bool):
        return text.lower() == str(choice).lower()
    if isinstance(choice, (int, float)):
        try:
            return float(text) == choice
        except ValueError:
            return False
    return same_value(name, choice, text)


def _flag(name: str, text: str | None = None) -> str:
    """How the user gave a fix: the command line's --mixed-precision arrives as a --fix of fp_precision, so both are named."""
    given = f"--fix {name}" if text is None else f"--fix {name}={text}"
    return f"{given} (or --mixed-precision)" if name == "fp_precision" else given


def _parse_value(name: str, p: CategoricalParam | FloatParam | IntParam, text: str) -> Any:
    """``text`` read with the parameter's type and checked against its choices or range (:meth:`problem_with`)."""
    where = _flag(name, text)
    value: Any
    if isinstance(p, CategoricalParam):
        # Unmatched, the text itself is checked: it is no choice, and the message lists them.
        value = next((choice for choice in p.choices if _matches(name, choice, text)), text)
    else:
        try:
            value = int(text) if isinstance(p, IntParam) else float(text)
        except ValueError:
            kind = "a whole number" if isinstance(p, IntParam) else "a number"
            raise SearchSpaceError(f"{where}: expected {kind}") from None
    problem = p.problem_with(value, within="the searched range")
    if problem:
        raise SearchSpaceError(f"{where}: {problem.removeprefix('is ')}")
    return value
