"""Search spaces: YAML validated into typed objects, and sampled through an Optuna trial."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import optuna
import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from hpo._errors import UserError
from trial_executor import METRICS, PRECISIONS, TrainConfig

DEFAULT_SPACE = Path(__file__).resolve().parent.parent / "search_spaces" / "default.yaml"
# Set per run or per trial from the command line, never searched or fixed in a space.
_RESERVED = {"seed": "--seed", "device": "--device", "cache_dir": "--cache-dir"}


class SearchSpaceError(UserError):
    """The search-space file is malformed or names something that cannot run."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CategoricalParam(_Strict):
    type: Literal["categorical"]
    choices: list[str | int | float | bool] = Field(min_length=1)


class FloatParam(_Strict):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = None


class IntParam(_Strict):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = 1


Param = Annotated[CategoricalParam | FloatParam | IntParam, Field(discriminator="type")]


class NoPruner(_Strict):
    type: Literal["none"]


class MedianPrunerSpec(_Strict):
    type: Literal["median"]
    n_startup_trials: int = Field(default=5, ge=0)
    n_warmup_steps: int = Field(default=0, ge=0)
    interval_steps: int = Field(default=1, ge=1)


class HyperbandPrunerSpec(_Strict):
    type: Literal["hyperband"]
    min_resource: int = Field(default=1, ge=1)
    max_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(default=3, ge=2)


class SuccessiveHalvingPrunerSpec(_Strict):
    type: Literal["successive_halving"]
    min_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(default=4, ge=2)
    min_early_stopping_rate: int = Field(default=0, ge=0)


PrunerSpec = Annotated[
    NoPruner | MedianPrunerSpec | HyperbandPrunerSpec | SuccessiveHalvingPrunerSpec, Field(discriminator="type")
]


class Objective(_Strict):
    metric: Literal[METRICS] = "accuracy"  # type: ignore[valid-type]
    direction: Literal["maximize", "minimize"] = "maximize"


class SearchSpace(_Strict):
    """What to search (``params``), what to hold (``fixed``), what to optimise and how to prune."""

    objective: Objective = Objective()
    pruner: PrunerSpec = NoPruner(type="none")
    params: dict[str, Param] = Field(min_length=1)
    fixed: dict[str, Any] = Field(default_factory=dict)

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample every parameter (enqueued trials get their enqueued values)."""
        values: dict[str, Any] = {}
        for name, p in self.params.items():
            if isinstance(p, CategoricalParam):
                values[name] = trial.suggest_categorical(name, p.choices)
            elif isinstance(p, FloatParam):
                values[name] = trial.suggest_float(name, p.low, p.high, log=p.log, step=p.step)
            else:
                values[name] = trial.suggest_int(name, p.low, p.high, log=p.log, step=p.step)
        return values

    def build_pruner(self) -> optuna.pruners.BasePruner:
        spec = self.pruner
        if isinstance(spec, MedianPrunerSpec):
            return optuna.pruners.MedianPruner(spec.n_startup_trials, spec.n_warmup_steps, spec.interval_steps)
        if isinstance(spec, HyperbandPrunerSpec):
            return optuna.pruners.HyperbandPruner(spec.min_resource, spec.max_resource, spec.reduction_factor)
        if isinstance(spec, SuccessiveHalvingPrunerSpec):
            return optuna.pruners.SuccessiveHalvingPruner(spec.min_resource, spec.reduction_factor, spec.min_early_stopping_rate)
        return optuna.pruners.NopPruner()

    def to_json(self) -> str:
        """Canonical JSON: equal spaces give equal strings (stored on the study)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


def _suggest_key(key: str, valid: list[str]) -> str:
    match = difflib.get_close_matches(key, valid, n=1)
    return f" (did you mean {match[0]!r}?)" if match else f" (valid keys: {', '.join(valid)})"


_TAGS = {"categorical", "float", "int", "none", "median", "hyperband", "successive_halving"}


def _pydantic_message(error: dict[str, Any]) -> str:
    # Discriminated unions put the tag into the location (params.lr.float.low): drop it.
    loc = [str(part) for i, part in enumerate(error["loc"]) if not (i in (1, 2) and part in _TAGS)]
    where = ".".join(loc)
    kind = error["type"]
    if kind == "extra_forbidden":
        tagged = {
            "categorical": CategoricalParam, "float": FloatParam, "int": IntParam, "none": NoPruner,
            "median": MedianPrunerSpec, "hyperband": HyperbandPrunerSpec, "successive_halving": SuccessiveHalvingPrunerSpec,
        }
        section: type[BaseModel] | None = {"objective": Objective}.get(loc[0], SearchSpace if len(loc) == 1 else None)
        tag = {"params": 2, "pruner": 1}.get(loc[0])
        if tag is not None and len(error["loc"]) > tag + 1:
            section = tagged.get(str(error["loc"][tag]))
        valid = [f for f in section.model_fields if f != "type"] if section else []
        return f"{where}: unknown key{_suggest_key(loc[-1], valid) if valid else ''}"
    if kind == "union_tag_invalid":
        got = error["input"].get("type") if isinstance(error["input"], dict) else error["input"]
        return f"{where}: unknown type {got!r}; expected one of {error['ctx']['expected_tags']}"
    if kind == "union_tag_not_found":
        return f"{where}: missing 'type'"
    if kind == "missing":
        return f"{where}: required key is missing"
    if kind == "too_short":
        return f"{where}: must not be empty"
    return f"{where}: {error['msg']}"


def _check_semantics(space: SearchSpace) -> str | None:
    fields = [f for f in TrainConfig.field_names() if f not in _RESERVED]
    for section, names in (("params", space.params), ("fixed", space.fixed)):
        for name in names:
            if name in _RESERVED:
                return f"{section}.{name}: set per run with {_RESERVED[name]}; remove it from the space"
            if name not in fields:
                return f"{section}.{name}: unknown parameter{_suggest_key(name, fields)}"
    both = sorted(set(space.params) & set(space.fixed))
    if both:
        return f"{both[0]} is both searched (params) and fixed; keep it in one section"
    for name, p in space.params.items():
        if isinstance(p, (FloatParam, IntParam)):
            if p.low > p.high:
                return f"params.{name}: low ({p.low}) must be <= high ({p.high})"
            if p.log and p.low <= 0:
                return f"params.{name}: log scale needs low > 0, got {p.low}"
            if p.log and p.step not in (None, 1):
                return f"params.{name}: step cannot be combined with log: true"
    precisions = space.params.get("fp_precision")
    candidates = precisions.choices if isinstance(precisions, CategoricalParam) else [space.fixed.get("fp_precision", "fp32")]
    for value in candidates:
        if value not in PRECISIONS:
            return f"unknown precision {value!r}; expected one of {', '.join(PRECISIONS)}"
    try:
        # Searched fields take their dataclass defaults here.
        TrainConfig(**space.fixed)
    except ValueError as err:
        return f"fixed: {err}"
    # Every value a trial can receive must make a valid executor config.
    for name, p in space.params.items():
        values = p.choices if isinstance(p, CategoricalParam) else [p.low, p.high]
        for value in values:
            try:
                TrainConfig(**{**space.fixed, name: value})
            except ValueError as err:
                return f"params.{name}: value {value!r} is invalid: {err}"
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
    problem = _check_semantics(space)
    if problem:
        raise SearchSpaceError(f"{source}: {problem}")
    return space


def load_search_space(path: str | Path = DEFAULT_SPACE) -> SearchSpace:
    """Read and validate a search-space YAML file."""
    path = Path(path)
    if not path.is_file():
        raise SearchSpaceError(f"search space {path} not found; pass an existing YAML file with --space")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise SearchSpaceError(f"search space {path}{where}: {problem}; fix the YAML syntax") from None
    except UnicodeDecodeError:
        raise SearchSpaceError(f"search space {path} is not UTF-8 text; re-save it as UTF-8") from None
    return parse_search_space(raw, source=f"search space {path}")
