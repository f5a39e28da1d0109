"""Search spaces as typed objects, sampled through an Optuna trial (reading YAML into them: :mod:`hpo.space._space_loading`)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import optuna
from optuna.trial import FrozenTrial
from pydantic import Field, PrivateAttr, field_validator, model_validator

from hpo.space._fixes import as_choice, canonical_precision, parse_fixes
from hpo.space._measures import NamedObjective, Objective, Strict, natural_direction
from hpo.space._params import CategoricalParam, FloatParam, IntParam, SearchSpaceError
from hpo.space._pruning import RetryChainPruner
from hpo.space._sampler import HidingSampler, MeasuredStartSampler, SeededPerTrialSampler
from trial_executor import METRICS, PRECISIONS, TASK_METRICS, TASKS

DEFAULT_SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "default.yaml"
# The space a pretrained model gets when none is given: learning rates for fine-tuning, not for random init.
FINETUNE_SPACE = DEFAULT_SPACE.parent / "finetune.yaml"


Param = Annotated[CategoricalParam | FloatParam | IntParam, Field(discriminator="type")]


class PrunerSpecBase(Strict):
    """What every pruner spec has; a new pruner type's spec class derives from it."""

    # Wrap the pruner in optuna's PatientPruner, which prunes a trial whose reported metric has
    # not improved for this many reports (with type none: patience alone).
    patience: int | None = Field(default=None, ge=0)
    # What the step of each reported value counts: optimizer steps, or training samples seen
    # (steps x batch size x accumulation). With samples, rungs and warm-up are counted in samples,
    # so trials of different batch sizes are compared after the same amount of data.
    report_step: Literal["steps", "samples"] = "steps"


class NoPruner(PrunerSpecBase):
    type: Literal["none"]


class MedianPrunerSpec(PrunerSpecBase):
    type: Literal["median"]
    n_startup_trials: int = Field(default=5, ge=0)
    n_warmup_steps: int = Field(default=0, ge=0)
    interval_steps: int = Field(default=1, ge=1)


class HyperbandPrunerSpec(PrunerSpecBase):
    type: Literal["hyperband"]
    min_resource: int = Field(default=1, ge=1)
    max_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(default=3, ge=2)


class SuccessiveHalvingPrunerSpec(PrunerSpecBase):
    type: Literal["successive_halving"]
    min_resource: int | Literal["auto"] = "auto"
    reduction_factor: int = Field(default=4, ge=2)
    min_early_stopping_rate: int = Field(default=0, ge=0)

    @field_validator("min_resource")
    @classmethod
    def _at_least_one(cls, value: int | str) -> int | str:  # Optuna's own check would be a traceback at the first trial
        if value != "auto" and int(value) < 1:
            raise ValueError(f"must be at least 1 or auto, got {value}")
        return value


PrunerSpec = Annotated[
    NoPruner | MedianPrunerSpec | HyperbandPrunerSpec | SuccessiveHalvingPrunerSpec, Field(discriminator="type")
]
# Each pruner spec -> the Optuna pruner it builds (None: no pruner but the spec's patience).
# A new pruner type is a spec class in PrunerSpec and its builder here.
PRUNER_BUILDERS: dict[type[Strict], Callable[[Any], optuna.pruners.BasePruner | None]] = {
    NoPruner: lambda spec: None,
    MedianPrunerSpec: lambda spec: optuna.pruners.MedianPruner(spec.n_startup_trials, spec.n_warmup_steps, spec.interval_steps),
    HyperbandPrunerSpec: lambda spec: optuna.pruners.HyperbandPruner(spec.min_resource, spec.max_resource, spec.reduction_factor),
    SuccessiveHalvingPrunerSpec: lambda spec: optuna.pruners.SuccessiveHalvingPruner(
        spec.min_resource, spec.reduction_factor, spec.min_early_stopping_rate
    ),
}


def _same_way_round(constraint: str, metric: str) -> str:
    """The constraint on ``metric`` that bounds it as ``constraint`` bounds its own measure (a floor on quality: a floor)."""
    bound, name = constraint[:4], constraint[4:]
    flipped = {"min_": "max_", "max_": "min_"}[bound] if natural_direction(name) != natural_direction(metric) else bound
    return f"{flipped}{metric}"


def tagged_types(union: Any) -> dict[str, type[Strict]]:
    """``type`` tag -> model class, for a discriminated union such as :data:`Param` or :data:`PrunerSpec`."""
    return {get_args(cls.model_fields["type"].annotation)[0]: cls for cls in get_args(get_args(union)[0])}


class TPESamplerSpec(Strict):
    """Optuna's TPE, set for short fine-tuning studies (a budget of a few dozen trials at most).

    ``n_startup_trials`` 4, not Optuna's 10: with 8 to 20 trials, ten random ones would leave
    TPE almost nothing to choose. ``multivariate`` (with ``group``) models the parameters
    jointly: learning rate and batch size interact. ``constant_liar`` makes workers sharing
    the study avoid proposing what another worker is running; with one worker it changes nothing.
    """

    type: Literal["tpe"]
    n_startup_trials: int = Field(default=4, ge=0)
    multivariate: bool = True
    group: bool = True
    constant_liar: bool = True

    @model_validator(mode="after")
    def _group_needs_multivariate(self) -> TPESamplerSpec:
        if self.group and not self.multivariate:
            raise ValueError("group: true needs multivariate: true; set multivariate: true or group: false")
        return self


class RandomSamplerSpec(Strict):
    type: Literal["random"]


SamplerSpec = Annotated[TPESamplerSpec | RandomSamplerSpec, Field(discriminator="type")]


class VerdictSpec(Strict):
    """``verdict:``: once the study has its budget, its best trial re-trained per precision with ``seeds`` paired seeds."""

    seeds: int = Field(3, ge=2, le=30)
    precisions: list[str] | None = Field(default=None, min_length=2)  # default: every precision

    @field_validator("precisions")
    @classmethod
    def _known_precisions(cls, value: list[str] | None) -> list[str] | None:
        unknown = [p for p in value or [] if p not in PRECISIONS]
        if unknown or (value is not None and ("fp32" not in value or len(set(value)) < 2)):
            raise ValueError(f"precisions must name fp32 and others of {', '.join(PRECISIONS)}, got {value}")
        return value


class SearchSpace(Strict):
    """What to search (``params``), what to hold (``fixed``), what to optimise and how to prune.

    Exactly one of ``objective`` (one metric) and ``objectives`` (several: the study is
    multi-objective and its best trials are a Pareto front) is set; with neither, the
    objective is accuracy, maximised. ``constraints`` (``max_<measure>``/``min_<measure>``)
    mark trials feasible or not for the sampler; ``oom_fallback`` retries a trial that ran
    out of memory once with half the micro-batch and twice the accumulation steps. ``task``
    says what the labels are for (classification, regression, multi_label); ``auto`` decides it
    from the labels where that is unambiguous.
    """

    objective: Objective | None = None
    objectives: list[NamedObjective] | None = Field(default=None, min_length=1)
    # What the labels are for (the executor's TASKS); auto: what the data's labels say.
    task: Literal[("auto", *TASKS)] = "auto"  # type: ignore[valid-type]
    pruner: PrunerSpec = NoPruner(type="none")
    sampler: SamplerSpec = TPESamplerSpec(type="tpe")
    params: dict[str, Param] = Field(min_length=1)
    # Known-good configurations (searched params; the rest sampled) run first, once per study.
    enqueue: list[dict[str, Any]] = Field(default_factory=list)
    fixed: dict[str, Any] = Field(default_factory=dict)
    constraints: dict[str, float] = Field(default_factory=dict)
    oom_fallback: bool = False
    # What `run` does after the budget (python -m hpo verdict); not part of what is searched, never stored.
    verdict: VerdictSpec | None = None
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
    def reports_samples(self) -> bool:
        """Whether reported steps count training samples seen rather than optimizer steps."""
        return self.pruner.report_step == "samples"

    @property
    def reports_intermediate_values(self) -> bool:
        """Pruners see one evaluation metric per evaluation: only single eval-metric objectives report."""
        return not self.is_multi_objective and self.objective_names[0] in METRICS

    def check_task(self, task: str) -> None:
        """Refuse an objective, constraint or early-stopping metric that ``task``'s data (see ``TASK_METRICS``) does not measure."""
        measured = TASK_METRICS[task]
        where = "objective.metric" if self.objectives is None else "objectives"
        searched = self.params.get("early_stopping_metric")
        stopping = searched.choices if isinstance(searched, CategoricalParam) else [self.fixed.get("early_stopping_metric")]
        objective_example = f"objective: {{metric: {measured[0]}}}"
        named = [(where, name, objective_example) for name in self.objective_names]
        named += [("early_stopping_metric", name, objective_example) for name in stopping]
        # A constraint's key is max_<name> or min_<name>; the example bounds the task's metric the same way round
        # (min_accuracy on regression data: max_rmse, as rmse is minimised).
        named += [(f"constraints.{key}", key[4:], _same_way_round(key, measured[0])) for key in self.constraints]
        for key, name, example in named:
            if name in METRICS and name not in measured:
                raise SearchSpaceError(f"{key}: {name!r} is not measured on {task} data; use one of {', '.join(measured)} (e.g. {example})")

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

    def enqueued_params(self) -> list[dict[str, Any]]:
        """The ``enqueue`` entries, each value as the space's own choice (``none`` for fp32 becomes the space's fp32)."""
        return [{name: as_choice(name, self.params[name], value) for name, value in entry.items()} for entry in self.enqueue]

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
        pruner = PRUNER_BUILDERS[type(spec)](spec)
        if spec.patience is not None:
            pruner = optuna.pruners.PatientPruner(pruner, patience=spec.patience)
        # Each retry chain judged as one trial: a retry copies its predecessor's rung values.
        return RetryChainPruner(pruner) if pruner is not None else optuna.pruners.NopPruner()

    def build_sampler(
        self, seed: int, measured: Callable[[FrozenTrial], bool] | None = None, hidden: Callable[[FrozenTrial], bool] | None = None,
    ) -> optuna.samplers.BaseSampler:
        """The space's sampler, each trial's draws seeded with ``seed`` mixed with the trial's number
        (:class:`SeededPerTrialSampler`); TPE also handles several objectives and constraints.

        With ``measured``, TPE's random start lasts until ``n_startup_trials`` finished trials are ``measured``
        (:class:`MeasuredStartSampler`), not merely finished. With ``hidden``, TPE models the study without the trials
        it names (:class:`HidingSampler`). With ``fixes`` (``--fix``), those parameters are pinned for this run and
        still recorded as each trial's params.
        """
        spec = self.sampler
        sampler: optuna.samplers.BaseSampler
        if isinstance(spec, RandomSamplerSpec):
            sampler = SeededPerTrialSampler(lambda trial_seed: optuna.samplers.RandomSampler(seed=trial_seed), seed)
        else:
            def tpe(trial_seed: int) -> optuna.samplers.BaseSampler:
                with warnings.catch_warnings():
                    # multivariate, group and constant_liar are "experimental" in Optuna: our choices, not the user's concern.
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    return optuna.samplers.TPESampler(
                        seed=trial_seed, n_startup_trials=spec.n_startup_trials, multivariate=spec.multivariate, group=spec.group,
                        constant_liar=spec.constant_liar,
                    )

            # Only the samplers that hold a random stream are made per trial: the wrappers keep what they read once.
            sampler = SeededPerTrialSampler(tpe, seed)
            if hidden is not None:
                sampler = HidingSampler(sampler, hidden)
            if measured is not None:
                sampler = MeasuredStartSampler(sampler, spec.n_startup_trials, measured, seed=seed)
        if not self.fixes:
            return sampler
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # PartialFixedSampler's: as above
            return optuna.samplers.PartialFixedSampler(self.fixes, sampler)

    def stored_form(self) -> dict[str, Any]:
        """The space as stored on the study; equal spaces give equal forms.

        Keys added after the first studies were stored are left out while unused, so those
        studies still resume with their original space file.
        """
        dumped = self.model_dump(mode="json", exclude={"verdict"})
        unused_keys = (
            ("objective", None), ("objectives", None), ("constraints", {}), ("oom_fallback", False), ("task", "auto"),
            ("sampler", TPESamplerSpec(type="tpe").model_dump(mode="json")), ("enqueue", []),
        )
        for key, unused in unused_keys:
            if dumped[key] == unused:
                del dumped[key]
        for param in dumped["params"].values():
            if param["default"] is None:
                del param["default"]
        for key, unused in (("patience", None), ("report_step", "steps")):
            if dumped["pruner"].get(key, unused) == unused:
                dumped["pruner"].pop(key, None)
        return dumped

    def to_json(self) -> str:
        """Canonical JSON of :meth:`stored_form`."""
        return json.dumps(self.stored_form(), sort_keys=True)
