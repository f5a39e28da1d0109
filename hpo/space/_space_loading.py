"""Reading a search space: YAML parsed, validated into a :class:`SearchSpace`, every problem in one line."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Hashable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic import BaseModel

from hpo._errors import did_you_mean, suggest_key
from hpo._process import usable_cpus
from hpo.space._fixes import as_choice, canonical_precision, same_choice_of
from hpo.space._measures import CONSTRAINT_KEYS, OBJECTIVE_NAMES, NamedObjective, Objective, unmeetable_constraint
from hpo.space._params import RESERVED_KEYS, CategoricalParam, FloatParam, IntParam, SearchSpaceError
from hpo.space._space import (
    DEFAULT_SPACE,
    HyperbandPrunerSpec,
    Param,
    PrunerSpec,
    SamplerSpec,
    SearchSpace,
    tagged_types,
)
from trial_executor import METRICS, PRECISIONS, TrainConfig


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (plain YAML keeps the last silently), and a
    number or switch YAML 1.1 reads otherwise than YAML 1.2 does (``010``, ``1:30``, ``on``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:  # `<<: *anchor`: its keys may be overridden here, that is what merging is for
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):  # `? [a, b]`: PyYAML's own check says "found unhashable key" with its mark
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                raise SearchSpaceError(f"line {line}: duplicate key {key!r} (first on line {seen[key]}); keep one of them")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = super().construct_yaml_int(node)
        _refuse_yaml11_number(node, value)
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        _refuse_yaml11_number(node, value)
        return value

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> bool:
        value = super().construct_yaml_bool(node)
        if node.value.lower() not in ("true", "false"):  # yes, no, on, off: text in YAML 1.2
            raise SearchSpaceError(f"line {node.start_mark.line + 1}: {node.value} is {str(value).lower()} in YAML 1.1 (the reader's), "
                                   f"text in YAML 1.2; write true or false, or quote it for text ('{node.value}')")
        return value


def _refuse_yaml11_number(node: yaml.ScalarNode, value: float) -> None:
    """YAML 1.1 reads ``010`` as octal 8 and ``1:30`` as base 60 (90), where YAML 1.2 and a user mean 10 and text:
    neither reading is taken, the line says both and how to write each."""
    text = node.value.replace("_", "")
    digits = text.lstrip("+-")
    if ":" in text:
        other = "text"
    elif len(digits) > 1 and digits[0] == "0" and digits.isdigit() and int(text, 10) != value:  # 07 is 7 in both
        other = str(int(text, 10))
    else:
        return
    raise SearchSpaceError(f"line {node.start_mark.line + 1}: {node.value} is {value} in YAML 1.1 (the reader's), {other} in "
                           f"YAML 1.2; write the number you mean without a leading 0 or a colon, or quote it for text ('{node.value}')")


# YAML 1.1 (PyYAML) reads 1e-5 (no dot) and 1.0e5 (no exponent sign) as strings; YAML 1.2 and every ML
# config reader take them as the floats users mean. Appended, so tried after the 1.1 forms.
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _UniqueKeyLoader.construct_yaml_float)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:bool", _UniqueKeyLoader.construct_yaml_bool)


_TAGS = {"categorical", "float", "int", "none", "median", "hyperband", "successive_halving", "tpe", "random"}


def _shown(value: Any, width: int = 80) -> str:
    """``repr(value)``, cut to ``width`` characters: a whole section given where a value belongs is no one line."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _pydantic_message(error: dict[str, Any]) -> str:
    # Discriminated unions put the tag into the location (params.lr.float.low): drop it.
    loc = [str(part) for i, part in enumerate(error["loc"]) if not (i in (1, 2) and part in _TAGS)]
    where = ".".join(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        tagged = {**tagged_types(Param), **tagged_types(PrunerSpec), **tagged_types(SamplerSpec)}
        sections: dict[str, type[BaseModel]] = {"objective": Objective, "objectives": NamedObjective}
        section: type[BaseModel] | None = sections.get(loc[0], SearchSpace if len(loc) == 1 else None)
        tag = {"params": 2, "pruner": 1, "sampler": 1}.get(loc[0])
        if tag is not None and len(error["loc"]) > tag + 1:
            section = tagged.get(str(error["loc"][tag]))
        valid = [f for f in section.model_fields if f != "type"] if section else []
        if section is not None and not valid:  # the random sampler, the none pruner: nothing to tune
            return f"{where}: unknown key ({loc[0]} type {error['loc'][tag]!r} takes no key but type)"
        return f"{where}: unknown key{suggest_key(loc[-1], valid) if valid else ''}"
    if kind == "union_tag_invalid":
        got = error["input"].get("type") if isinstance(error["input"], dict) else error["input"]
        return f"{where}: unknown type {got!r}; expected one of {error['ctx']['expected_tags']}"
    if kind == "union_tag_not_found":
        typo = next((key for key in error["input"] if did_you_mean(str(key), ["type"])), None) if isinstance(error["input"], dict) else None
        return f"{where}.{typo}: unknown key (did you mean 'type'?)" if typo is not None else f"{where}: missing 'type'"
    if where == "params" and kind in ("missing", "too_short"):
        return (f"{where}: {'required key is missing' if kind == 'missing' else 'must not be empty'}; a study searches at least "
                "one parameter: name one, even a categorical of one choice (hpo best --format space writes such a space)")
    if kind == "missing":
        return f"{where}: required key is missing"
    if kind == "too_short":
        return f"{where}: must not be empty"
    if kind == "value_error":
        return f"{where}: {error['ctx']['error']}"
    if kind == "finite_number":
        return f"{where}: must be a finite number, got {error['input']!r}"
    if len(loc) == 5 and loc[0] == "params" and loc[2] == "choices" and kind.endswith("_type"):  # each member type's error: one line
        given = error["input"]
        fix = f"leave {loc[1]} at null by setting it in fixed: instead" if given is None else "write one value (quoted, if text)"
        shown = "null" if given is None else repr(given)
        return f"params.{loc[1]}.choices[{loc[3]}]: {shown} cannot be a choice (a string, a number, true or false); {fix}"
    if where == "params" and isinstance(error["input"], list):  # the list of named entries other tools write
        return ("params: is a list; write it as a mapping of each parameter's name to its spec "
                f"(learning_rate: {{type: float, low: 1e-5, high: 1e-3}}), got {_shown(error['input'])}")
    if kind.endswith("_type"):  # strict types: YAML's true is not 1, a quoted "16000" is not a number
        return f"{where}: {error['msg'].replace('Input should', 'must')}, got {_shown(error['input'])}"
    return f"{where}: {error['msg']}"


def _check_range(name: str, p: CategoricalParam | FloatParam | IntParam) -> str | None:
    if not isinstance(p, (FloatParam, IntParam)):
        return None
    if p.low > p.high:
        return f"params.{name}: low ({p.low}) must be <= high ({p.high})"
    if p.log and p.low <= 0:
        return f"params.{name}: log scale needs low > 0, got {p.low}"
    # An int's step is 1 unless given; a float's step of 1 is a step all the same, which Optuna refuses beside log.
    if p.log and p.step is not None and (isinstance(p, FloatParam) or p.step != 1):
        return f"params.{name}: step cannot be combined with log: true; drop step, or log"
    if p.step and p.problem_with(p.high):  # the membership rule: off the grid, Optuna warns and samples below high
        # The two highs on the grid, in decimal: the written values' digits, not their binary sums.
        low, high, step = (Decimal(str(v)) for v in (p.low, p.high, p.step))
        last = low + (high - low) // step * step
        return f"params.{name}: high {p.high} is not on the step grid from low {p.low} (step {p.step}); set high to {last} or {last + step}"
    return None


def _check_default(name: str, p: CategoricalParam | FloatParam | IntParam) -> str | None:
    problem = None if p.default is None else p.problem_with(p.default)
    return problem and f"params.{name}.default: {p.default!r} {problem}"


def _check_repeated_choice(name: str, p: CategoricalParam | FloatParam | IntParam) -> str | None:
    """A choice listed twice would be sampled twice as often, which nobody means by listing it."""
    if not isinstance(p, CategoricalParam):
        return None
    for i, choice in enumerate(p.choices):
        # fp_precision's aliases count as fp32: [fp32, none] would sample fp32 twice as often.
        twin = next((earlier for earlier in p.choices[:i] if same_choice_of(name, earlier, choice)), None)
        if twin is not None:
            twice = f"{choice!r} twice" if twin == choice else f"fp32 twice ({twin!r} and {choice!r} are both fp32)"
            return f"params.{name}.choices lists {twice}; list each choice once"
    return None


def _check_objectives(space: SearchSpace) -> str | None:
    if space.objective is not None and space.objectives is not None:
        return "give either objective (one metric) or objectives (a list), not both"
    names = space.objective_names
    where = "objective.metric" if space.objectives is None else "objectives"
    for name in names:
        if name not in OBJECTIVE_NAMES:
            return f"{where}: unknown measure {name!r}{suggest_key(name, list(OBJECTIVE_NAMES))}"
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        return f"objectives: {repeated[0]!r} is listed twice"
    if space.pruner.type != "none" or space.pruner.patience is not None:
        # type none with patience prunes by patience alone: then patience is what to drop.
        what, fix = ("pruner.patience", "remove patience") if space.pruner.type == "none" else (f"pruner: {space.pruner.type!r}", "use pruner: {type: none}")
        if space.is_multi_objective:
            # Optuna prunes on one reported value per step; a multi-objective trial has none.
            return f"{what} cannot prune a study with several objectives; {fix}"
        if names[0] not in METRICS:
            return f"{what} needs an evaluation metric ({', '.join(METRICS)}) as the objective; {names[0]} is measured once, at the end; {fix}"
    for key in space.constraints:
        if key not in CONSTRAINT_KEYS:
            return f"constraints.{key}: unknown constraint{suggest_key(key, list(CONSTRAINT_KEYS))}"
    return unmeetable_constraint(space.constraints)


def _check_limits(space: SearchSpace) -> str | None:
    """Bounds that the types alone do not say: the pruner's resources, worker processes per trial."""
    pruner = space.pruner
    if isinstance(pruner, HyperbandPrunerSpec) and pruner.max_resource != "auto" and pruner.min_resource > pruner.max_resource:
        return f"pruner: min_resource ({pruner.min_resource}) must be <= max_resource ({pruner.max_resource}); lower min_resource or raise max_resource"
    searched = space.params.get("num_workers")
    if isinstance(searched, CategoricalParam):
        values = [v for v in searched.choices if isinstance(v, int)]
    else:
        values = [searched.high] if isinstance(searched, IntParam) else [space.fixed.get("num_workers", 0)]
    cpus = usable_cpus()
    top = max(values, default=0)
    if isinstance(top, int) and not isinstance(top, bool) and top > cpus:
        where = "params.num_workers" if searched is not None else "fixed.num_workers"
        return f"{where}: {top} DataLoader worker processes per trial exceeds this machine's {cpus} CPUs; use at most {cpus}"
    return None


def _check_enqueue(space: SearchSpace) -> str | None:
    """Each ``enqueue`` entry names searched params only, with values the space can sample."""
    for index, entry in enumerate(space.enqueue):
        for name, value in entry.items():
            where = f"enqueue[{index}].{name}"
            if name not in space.params:
                return f"{where}: not a searched parameter{suggest_key(str(name), list(space.params))}; enqueue sets params only"
            if not space.params[name].contains(as_choice(name, space.params[name], value)):
                return f"{where}: {value!r} is not a value of the searched {space.params[name].describe()}"
    return None


def _check_semantics(space: SearchSpace) -> str | None:
    problem = _check_objectives(space) or _check_limits(space) or _check_enqueue(space)
    if problem:
        return problem
    fields = [f for f in TrainConfig.field_names() if f not in RESERVED_KEYS]
    for section, names in (("params", space.params), ("fixed", space.fixed)):
        for name in names:
            if name in RESERVED_KEYS:
                return f"{section}.{name}: set per run with {RESERVED_KEYS[name]}; remove it from the space"
            if name not in fields:
                return f"{section}.{name}: unknown parameter{suggest_key(name, fields)}"
    both = sorted(set(space.params) & set(space.fixed))
    if both:
        return f"{both[0]} is both searched (params) and fixed; keep it in one section"
    for name, p in space.params.items():
        problem = _check_range(name, p) or _check_default(name, p) or _check_repeated_choice(name, p)
        if problem:
            return problem
    precisions = space.params.get("fp_precision")
    defaults = TrainConfig.defaults()  # what a trial gets for a field the space neither searches nor fixes
    candidates = precisions.choices if isinstance(precisions, CategoricalParam) else [space.fixed.get("fp_precision", defaults["fp_precision"])]
    for value in candidates:
        if isinstance(value, bool):
            return (f"fp_precision: got the YAML boolean {str(value).lower()} (YAML reads a bare no, yes, off or on as one); "
                    f"quote it ('no' means fp32) or write one of {', '.join(PRECISIONS)}")
        if canonical_precision(value) not in PRECISIONS:
            return f"unknown precision {value!r}; expected one of {', '.join(PRECISIONS)} (or none = fp32)"
    finetune = space.params.get("finetune")
    modes = finetune.choices if isinstance(finetune, CategoricalParam) else [space.fixed.get("finetune", defaults["finetune"])]
    if "lora" in modes:
        # Here, not at the top: _lora imports torch, which reading a space should not need.
        from trial_executor.model import INSTALL_HINT, peft_available

        if not peft_available():
            return INSTALL_HINT
    return _check_configs(space)


def _edge_values(p: CategoricalParam | FloatParam | IntParam) -> list[Any]:
    """The values a trial can receive that a rule can tell apart: every choice, a range's two ends."""
    return p.choices if isinstance(p, CategoricalParam) else [p.low, p.high]


def _check_configs(space: SearchSpace) -> str | None:
    """Every value a trial can receive must make a valid executor config, beside the fixed values and the other
    searched ones. A relation rule is between two fields (compile_step with capture_step, num_workers with
    persistent_workers or prefetch_factor), so each value is tried with the others at their defaults, and each two
    searched values together: a trial that drew a bad pair would fail at its start, and the sampler would draw it again."""
    base = {**space.fixed, **{name: p.default_value() for name, p in space.params.items()}}
    try:
        TrainConfig(**base)
    except ValueError as err:
        try:
            TrainConfig(**space.fixed)
        except ValueError as fixed_err:
            return f"fixed: {fixed_err}"
        return f"params: the searched defaults (what the baseline trial runs) are invalid together: {err}; change a default"
    for name, p in space.params.items():
        for value in _edge_values(p):
            try:
                TrainConfig(**{**base, name: value})
            except ValueError as err:
                return f"params.{name}: value {value!r} is invalid: {err}"
    names = list(space.params)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            for a, b in itertools.product(_edge_values(space.params[first]), _edge_values(space.params[second])):
                try:
                    TrainConfig(**{**base, first: a, second: b})
                except ValueError as err:
                    return (f"params: {first}={a!r} with {second}={b!r} is invalid: {err}; a trial can draw both, "
                            f"so search only one of {first} and {second}, or drop the choice")
    return None


def parse_search_space(raw: Any, source: str = "search space") -> SearchSpace:
    """Validate already-parsed YAML; raise :class:`SearchSpaceError` with one line on failure."""
    if not isinstance(raw, dict):
        raise SearchSpaceError(f"{source}: expected a mapping with 'params' at the top level")
    try:
        space = SearchSpace.model_validate(raw)
    except pydantic.ValidationError as err:
        # An unknown key usually explains the errors that follow it (a typo'd "params").
        first = sorted(err.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
        raise SearchSpaceError(f"{source}: {_pydantic_message(first)}") from None
    return checked(space, source)


def checked(space: SearchSpace, source: str) -> SearchSpace:
    """``space`` once it passes the checks its types alone do not make (the same as a parsed space's).

    For a space changed in code (``model_copy(update=...)``, which pydantic does not validate):
    :class:`SearchSpaceError` naming ``source`` and the first problem.
    """
    problem = _check_semantics(space)
    if problem:
        raise SearchSpaceError(f"{source}: {problem}")
    return space


def load_search_space(path: str | Path = DEFAULT_SPACE) -> SearchSpace:
    """Read and validate a search-space YAML file (``str`` or ``Path``; a mapping is :func:`parse_search_space`'s)."""
    if not isinstance(path, (str, os.PathLike)):  # a dict: a TypeError from inside pathlib named no fix
        hint = "; for a mapping (the YAML's content) use parse_search_space" if isinstance(path, Mapping) else ""
        raise SearchSpaceError(f"search space: expected a YAML file's path, got a {type(path).__name__}{hint}")
    path = Path(path)
    if path.exists() and not path.is_file():  # a directory, /dev/null: there, not "not found"
        what = "a directory" if path.is_dir() else "not a regular file"
        raise SearchSpaceError(f"search space {path} is {what}; pass a YAML file with --space (e.g. search_spaces/default.yaml)")
    if not path.is_file():
        raise SearchSpaceError(f"search space {path} not found; pass an existing YAML file with --space")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except SearchSpaceError as err:
        raise SearchSpaceError(f"search space {path} {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise SearchSpaceError(f"search space {path}{where}: {problem}; fix the YAML syntax") from None
    except UnicodeDecodeError:
        raise SearchSpaceError(f"search space {path} is not UTF-8 text; re-save it as UTF-8") from None
    except OSError as err:  # unreadable (permissions, a disk error): one line, as for a data file
        raise SearchSpaceError(f"search space {path} cannot be read ({err.strerror}); check the path and its permissions") from None
    return parse_search_space(raw, source=f"search space {path}")
