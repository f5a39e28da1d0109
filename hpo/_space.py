"""Search spaces: YAML validated into typed objects, and sampled through an Optuna trial."""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import optuna
import pydantic
import yaml
from pydantic import BaseModel, Field, PrivateAttr, model_validator

from hpo._errors import UserError
from hpo._fixes import canonical_precision, parse_fixes
from hpo._measures import CONSTRAINT_KEYS, OBJECTIVE_NAMES, NamedObjective, Objective, Strict
from trial_executor import METRICS, PRECISIONS, TrainConfig, lora_available
from trial_executor._lora import INSTALL_HINT as LORA_INSTALL_HINT

DEFAULT_SPACE = Path(__file__).resolve().parent.parent / "search_spaces" / "default.yaml"
# Set per run or per trial from the command line, never searched or fixed in a space.
_RESERVED = {"seed": "--seed", "device": "--device", "cache_dir": "--cache-dir"}


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
        return next(c for c in self.choices if _same_choice(c, self.default))


def _same_choice(a: Choice, b: Choice) -> bool:
    # True == 1 in Python; a bool default must not select an int choice, nor the reverse.
    return a == b and isinstance(a, bool) == isinstance(b, bool)


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


Param = Annotated[CategoricalParam | FloatParam | IntParam, Field(discriminator="type")]


class NoPruner(Strict):
    type: Literal["none"]
    # patience (every pruner): wrap it in optuna's PatientPruner, which prunes a trial whose
    # reported metric has not improved for this many reports (with type none: patience alone).
    patience: int | None = Field(default=None, ge=0)


class MedianPrunerSpec(Strict):
    patience: int | None = Field(default=None, ge=0)
    type: Literal["median"]
    n_startup_trials: int = Field(default=5, ge=0)
    n_warmup_steps: int = Field(default=0, ge=0)
    interval_steps: int = Field(default=1, ge=1)


class HyperbandPrunerSpec(Strict):
    patience: int | None = Field(default=None, ge=0)
    type: Literal["hyperband"]
    min_resource: int = Field(default=1, ge=1)
    max_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(default=3, ge=2)


class SuccessiveHalvingPrunerSpec(Strict):
    patience: int | None = Field(default=None, ge=0)
    type: Literal["successive_halving"]
    min_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(default=4, ge=2)
    min_early_stopping_rate: int = Field(default=0, ge=0)


PrunerSpec = Annotated[
    NoPruner | MedianPrunerSpec | HyperbandPrunerSpec | SuccessiveHalvingPrunerSpec, Field(discriminator="type")
]


class SearchSpace(Strict):
    """What to search (``params``), what to hold (``fixed``), what to optimise and how to prune.

    Exactly one of ``objective`` (one metric) and ``objectives`` (several: the study is
    multi-objective and its best trials are a Pareto front) is set; with neither, the
    objective is accuracy, maximised. ``constraints`` (``max_<measure>``/``min_<measure>``)
    mark trials feasible or not for the sampler; ``oom_fallback`` retries a trial that ran
    out of memory once with half the micro-batch and twice the accumulation steps.
    """

    objective: Objective | None = None
    objectives: list[NamedObjective] | None = Field(default=None, min_length=1)
    pruner: PrunerSpec = NoPruner(type="none")
    params: dict[str, Param] = Field(min_length=1)
    fixed: dict[str, Any] = Field(default_factory=dict)
    constraints: dict[str, float] = Field(default_factory=dict)
    oom_fallback: bool = False
    # --fix NAME=VALUE for this run (see parse_fixes): not part of the space, never stored.
    _fixes: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_objective(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("objective") is None and data.get("objectives") is None:
            return {**data, "objective": {}}
        return data

    @property
    def objective_specs(self) -> list[tuple[str, str]]:
        """``(name, direction)`` of every objective, in order; the first is the primary one."""
        if self.objectives is not None:
            return [(o.name, o.direction) for o in self.objectives]
        objective = self.objective or Objective()
        return [(objective.metric, objective.direction)]

    @property
    def objective_names(self) -> list[str]:
        return [name for name, _ in self.objective_specs]

    @property
    def directions(self) -> list[str]:
        return [direction for _, direction in self.objective_specs]

    @property
    def is_multi_objective(self) -> bool:
        return len(self.objective_specs) > 1

    @property
    def reports_intermediate_values(self) -> bool:
        """Pruners see one evaluation metric per evaluation: only single eval-metric objectives report."""
        return not self.is_multi_objective and self.objective_names[0] in METRICS

    @property
    def fixes(self) -> dict[str, Any]:
        """Parameters pinned for this run with ``--fix`` (see :meth:`with_fixes`)."""
        return dict(self._fixes)

    def with_fixes(self, fixes: dict[str, Any]) -> SearchSpace:
        """This space with ``fixes`` (from :meth:`parse_fixes`) pinned for the run; its stored form is unchanged."""
        copy = self.model_copy()
        copy._fixes = dict(fixes)
        return copy

    def baseline_params(self) -> dict[str, Any] | None:
        """fp32 plus every other searched parameter at its default (or its ``--fix`` value).

        ``None`` when fp32 (or an alias of it, e.g. ``none``) is not searched, or a fix pins
        another precision.
        """
        precision = self.params.get("fp_precision")
        if not isinstance(precision, CategoricalParam):
            return None
        fp32 = next((c for c in precision.choices if canonical_precision(c) == "fp32"), None)
        if fp32 is None or canonical_precision(self._fixes.get("fp_precision", fp32)) != "fp32":
            return None
        values = {name: fp32 if name == "fp_precision" else p.default_value() for name, p in self.params.items()}
        return {**values, **self._fixes}

    def parse_fixes(self, items: list[str]) -> dict[str, Any]:
        """``["NAME=VALUE", ...]`` (``--fix``) -> ``{name: value}``, each value one the space can sample.

        Values take the parameter's type and must be one of its choices (``fp_precision``
        aliases such as ``none`` match ``fp32``) or inside its range, on its step grid.
        Raises :class:`SearchSpaceError` with one line on a malformed item, an unknown or
        non-searched name, or a value out of bounds.
        """
        return parse_fixes(self, items)

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
        pruner: optuna.pruners.BasePruner | None = None
        if isinstance(spec, MedianPrunerSpec):
            pruner = optuna.pruners.MedianPruner(spec.n_startup_trials, spec.n_warmup_steps, spec.interval_steps)
        elif isinstance(spec, HyperbandPrunerSpec):
            pruner = optuna.pruners.HyperbandPruner(spec.min_resource, spec.max_resource, spec.reduction_factor)
        elif isinstance(spec, SuccessiveHalvingPrunerSpec):
            pruner = optuna.pruners.SuccessiveHalvingPruner(spec.min_resource, spec.reduction_factor, spec.min_early_stopping_rate)
        if spec.patience is not None:
            return optuna.pruners.PatientPruner(pruner, patience=spec.patience)
        return pruner or optuna.pruners.NopPruner()

    def stored_form(self) -> dict[str, Any]:
        """The space as stored on the study; equal spaces give equal forms.

        Keys added after the first studies were stored are left out while unused, so those
        studies still resume with their original space file.
        """
        dumped = self.model_dump(mode="json")
        for key, unused in (("objective", None), ("objectives", None), ("constraints", {}), ("oom_fallback", False)):
            if dumped[key] == unused:
                del dumped[key]
        for param in dumped["params"].values():
            if param["default"] is None:
                del param["default"]
        if dumped["pruner"]["patience"] is None:
            del dumped["pruner"]["patience"]
        return dumped

    def to_json(self) -> str:
        """Canonical JSON of :meth:`stored_form`."""
        return json.dumps(self.stored_form(), sort_keys=True)


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
        sections: dict[str, type[BaseModel]] = {"objective": Objective, "objectives": NamedObjective}
        section: type[BaseModel] | None = sections.get(loc[0], SearchSpace if len(loc) == 1 else None)
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


def _check_default(name: str, p: CategoricalParam | FloatParam | IntParam) -> str | None:
    if p.default is None:
        return None
    where = f"params.{name}.default"
    if isinstance(p, CategoricalParam):
        if not any(_same_choice(c, p.default) for c in p.choices):
            return f"{where}: {p.default!r} is not one of the choices {p.choices}"
        return None
    if not p.low <= p.default <= p.high:
        return f"{where}: {p.default!r} is outside [{p.low}, {p.high}]"
    if p.step and not math.isclose((p.default - p.low) / p.step, round((p.default - p.low) / p.step), abs_tol=1e-9):
        return f"{where}: {p.default!r} is not on the step grid (low {p.low}, step {p.step})"
    return None


def _check_objectives(space: SearchSpace) -> str | None:
    if space.objective is not None and space.objectives is not None:
        return "give either objective (one metric) or objectives (a list), not both"
    names = space.objective_names
    where = "objective.metric" if space.objectives is None else "objectives"
    for name in names:
        if name not in OBJECTIVE_NAMES:
            return f"{where}: unknown measure {name!r}{_suggest_key(name, list(OBJECTIVE_NAMES))}"
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        return f"objectives: {repeated[0]!r} is listed twice"
    if space.pruner.type != "none" or space.pruner.patience is not None:
        if space.is_multi_objective:
            # Optuna prunes on one reported value per step; a multi-objective trial has none.
            return f"pruner: {space.pruner.type!r} cannot prune a study with several objectives; use pruner: {{type: none}}"
        if names[0] not in METRICS:
            return (
                f"pruner: {space.pruner.type!r} needs an evaluation metric ({', '.join(METRICS)}) as the objective; "
                f"{names[0]} is measured once, at the end; use pruner: {{type: none}}"
            )
    for key, limit in space.constraints.items():
        if key not in CONSTRAINT_KEYS:
            return f"constraints.{key}: unknown constraint{_suggest_key(key, list(CONSTRAINT_KEYS))}"
        if not math.isfinite(limit):
            return f"constraints.{key}: the limit must be a finite number, got {limit}"
    return None


def _check_semantics(space: SearchSpace) -> str | None:
    problem = _check_objectives(space)
    if problem:
        return problem
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
        problem = _check_default(name, p)
        if problem:
            return problem
    precisions = space.params.get("fp_precision")
    candidates = precisions.choices if isinstance(precisions, CategoricalParam) else [space.fixed.get("fp_precision", "fp32")]
    for value in candidates:
        if canonical_precision(value) not in PRECISIONS:
            return f"unknown precision {value!r}; expected one of {', '.join(PRECISIONS)} (or none = fp32)"
    finetune = space.params.get("finetune")
    modes = finetune.choices if isinstance(finetune, CategoricalParam) else [space.fixed.get("finetune", "full")]
    if "lora" in modes and not lora_available():
        return LORA_INSTALL_HINT
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
