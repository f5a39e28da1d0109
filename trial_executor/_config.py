"""The executor's input: one plain, validated configuration per trial."""

from __future__ import annotations

import math
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from trial_executor._precisions import PRECISION_ALIASES, PRECISIONS

# Plain names, here rather than beside the code that uses them, so that reading a config
# (the orchestrator, read-only commands) does not import torch.

# What the labels ask of the model, and what each kind of task is measured by (the first: the
# default early-stopping metric). Regression and multi-label metrics: trial_executor.train._metrics.
TASKS: tuple[str, ...] = ("classification", "regression", "multi_label")
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "macro_f1", "loss"),
    "regression": ("rmse", "pearson", "spearman", "loss"),
    "multi_label": ("micro_f1", "macro_f1", "subset_accuracy", "loss"),
}
METRICS: tuple[str, ...] = tuple(dict.fromkeys(m for names in TASK_METRICS.values() for m in names))
# A classification evaluation's flag beside its metrics (1.0 or 0.0): every row predicted as one
# class, or exactly the majority class's share right. A trial stuck there learned nothing.
MAJORITY_CLASS = "majority_class"
MINIMIZED_METRICS: tuple[str, ...] = ("loss", "rmse")
LR_SCHEDULES: tuple[str, ...] = ("linear", "cosine", "constant")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
SEED_RANGE = (0, 2**32 - 1)  # what numpy's (np.random.seed) and Optuna's samplers' seeds accept
# Below this size a model's per-call overhead outweighs the padding that chunking saves
# (measured: tiny-bert 0.3M params loses ~35% in bf16, minilm-l6 22M params gains ~40%).
CHUNKING_MIN_PARAMS = 5_000_000
FINETUNE_MODES: tuple[str, ...] = ("full", "lora")

# The choices as types, from the tuples above (Literal[("a", "b")] is Literal["a", "b"]).
PrecisionName = Literal[PRECISIONS]  # type: ignore[valid-type]
LrSchedule = Literal[LR_SCHEDULES]  # type: ignore[valid-type]
Device = Literal[DEVICES]  # type: ignore[valid-type]
FinetuneMode = Literal[FINETUNE_MODES]  # type: ignore[valid-type]
MetricName = Literal[METRICS]  # type: ignore[valid-type]


def _keep_int(value: Any, handler: ValidatorFunctionWrapHandler) -> float:
    # Validated as a strict float (an int passes, a bool or a string does not; bounds checked), but
    # an int is kept as given (``learning_rate: 1``), so that to_dict() and the checkpoints hold
    # what the user wrote.
    number = handler(value)
    return value if isinstance(value, int) else number


Number = Annotated[float, WrapValidator(_keep_int)]
# What a null means, where the error says a field may be null.
def nearest_step(steps: float) -> int:
    """``steps`` to the nearest whole step, a half up (round() takes 2.5 to 2 and 3.5 to 4): warmup and evaluation alike."""
    return math.floor(steps + 0.5)


_NULL_MEANS = {"eval_sample_size": " (every row)", "lora_alpha": " (2 x lora_rank)", "eval_every_samples": " (eval_every)"}
_BOUND_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}
_SIGNS: dict[type, str] = {Ge: ">=", Gt: ">", Le: "<=", Lt: "<"}


class TrainConfig(BaseModel):
    """Everything one training run needs besides the data.

    ``eval_every`` counts optimizer steps (0: evaluate only at the end), ``eval_every_samples``
    (when set, in its place) training samples: the same data between evaluations whatever the
    batch size, to match a pruner's ``report_step: samples``; early evaluations run on
    ``eval_sample_size`` validation rows, the same seeded sample in every trial (``None``, or a
    split no larger: every row), the final one on every row; ``max_steps`` caps
    optimizer steps across epochs (``None``: run every epoch in full). The effective batch is
    ``batch_size * grad_accum_steps``. ``length_grouping`` batches texts of similar length
    (see :mod:`trial_executor.batches._batching`); ``chunk_by_length`` computes each batch in
    length-sorted chunks (same rows and gradient, less padding; ``None``: only for models of
    ``CHUNKING_MIN_PARAMS`` or more that run the HF forward, where it was measured to pay);
    ``packed_forward`` computes BERT classifiers on real tokens only (the same function; see
    :mod:`trial_executor.model._packed`; other architectures run their own forward); ``cache_dir`` holds
    tokenized data shared across trials and processes (``None``: no disk cache).
    ``buckets`` pads each batch up to one of a few widths (static shapes for compiled or captured
    steps); ``varlen_attention`` runs the packed forward's attention through FlashAttention's varlen
    kernel (CUDA fp16/bf16; no attention-probability dropout). ``compile_step`` compiles the whole
    training step (forward with loss, backward, clipping, optimizer step) per static-shape bucket
    with ``dynamic=False``, as CUDA graphs on CUDA (see :mod:`trial_executor.train._compiled`); a step with
    more than one backward, or fp16's GradScaler, runs eager instead, with the reason recorded.
    ``capture_step`` (CUDA only) records that same step uncompiled, per bucket, as one CUDA graph
    and replays it (see :mod:`trial_executor.train._captured`); refused as ``compile_step`` is, off
    CUDA, and for a forward not known to read nothing on the host (the step then runs eager); not
    both at once.
    ``master_weights`` (bf16 only) runs the forward and backward on bf16 copies of the weights,
    refreshed once per optimizer step from the float32 weights the optimizer updates (see
    :mod:`trial_executor.precision._master_weights`), instead of under autocast.
    ``None`` for ``chunk_by_length``, ``packed_forward``, ``buckets``, ``torch_compile``,
    ``compile_step``, ``capture_step``, ``master_weights`` and ``varlen_attention`` takes the device's default
    (:mod:`trial_executor.device._defaults`, the one place that decides them).
    ``max_skipped_steps``: fp16 trials stop as non-finite once GradScaler skips more optimizer
    steps than this in a row.

    Issue-7 knobs: ``max_length="auto"`` picks the smallest multiple of 8 covering
    ``max_length_percentile`` % of the training texts' token lengths. ``finetune="lora"``
    trains LoRA adapters (``lora_rank``, ``lora_alpha``: ``None`` = 2 x rank, ``lora_dropout``,
    ``lora_target_modules``: comma-separated module names, ``None`` = per architecture) plus the
    classifier head. ``gradient_checkpointing`` recomputes each layer's activations in the
    backward pass. ``early_stopping_patience`` stops a run whose ``early_stopping_metric``
    (``None``: accuracy) has not improved for that many evaluations. ``num_workers`` > 0 collates
    training batches in DataLoader worker processes (``persistent_workers``, ``prefetch_factor`` as
    in :class:`torch.utils.data.DataLoader`). ``pin_memory`` has no effect (kept for older spaces):
    batches are pinned on CUDA always and never on the CPU.

    Invalid values raise :class:`ValueError` with one line naming each bad field
    (``batch_size must be >= 1``). Strict types: a bool is not an int (a YAML ``true`` as a batch
    size), a string is not a number, an int is a float (``learning_rate: 1``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    # pattern \S: a name with something in it, not "" or spaces.
    model: str = Field("tiny-bert", pattern=r"\S")
    fp_precision: PrecisionName = "fp32"
    batch_size: int = Field(32, ge=1)
    learning_rate: Number = Field(1e-3, gt=0)
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1)
    max_length: int | str = 64  # an int >= 8 or "auto": _auto_or_at_least_8
    max_length_percentile: Number = Field(99.5, gt=0, le=100)
    weight_decay: Number = Field(0.01, ge=0)
    warmup_ratio: Number = Field(0.1, ge=0, lt=1)
    lr_schedule: LrSchedule = "linear"
    grad_accum_steps: int = Field(1, ge=1)
    max_grad_norm: Number | None = Field(1.0, gt=0)
    eval_every: int = Field(50, ge=0)
    eval_every_samples: int | None = Field(None, ge=1)  # counts training samples instead; None: eval_every
    eval_batch_size: int = Field(256, ge=1)
    eval_sample_size: int | None = Field(512, ge=1)
    seed: int = Field(0, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    device: Device = "auto"
    cudnn_benchmark: bool = False
    length_grouping: bool = False
    chunk_by_length: bool | None = None
    torch_compile: bool | None = None
    compile_step: bool | None = None
    capture_step: bool | None = None
    master_weights: bool | None = None
    packed_forward: bool | None = None
    buckets: bool | None = None
    varlen_attention: bool | None = None
    max_skipped_steps: int = Field(20, ge=1)
    cache_dir: str | None = None
    finetune: FinetuneMode = "full"
    lora_rank: int = Field(8, ge=1)
    lora_alpha: Number | None = Field(None, gt=0)
    lora_dropout: Number = Field(0.1, ge=0, lt=1)
    lora_target_modules: str | None = Field(None, pattern=r"\S")
    gradient_checkpointing: bool = False
    early_stopping_patience: int | None = Field(None, ge=1)
    early_stopping_metric: MetricName | None = None
    num_workers: int = Field(0, ge=0)
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = Field(None, ge=1)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as err:
            # One line naming each bad field: callers put it into the user's one-line errors.
            raise ValueError(_explain(type(self), err)) from None

    @model_validator(mode="before")
    @classmethod
    def _canonical_precision(cls, values: Any) -> Any:
        precision = values.get("fp_precision") if isinstance(values, dict) else None
        if isinstance(precision, str) and precision in PRECISION_ALIASES:
            return {**values, "fp_precision": PRECISION_ALIASES[precision]}
        return values

    @field_validator("max_length")
    @classmethod
    def _auto_or_at_least_8(cls, value: int | str) -> int | str:
        if value != "auto" and not (isinstance(value, int) and value >= 8):
            raise ValueError("max_length must be an int >= 8 or 'auto'")
        return value

    @model_validator(mode="after")
    def _check_relations(self) -> TrainConfig:
        needs_workers = {"persistent_workers": self.persistent_workers, "prefetch_factor": self.prefetch_factor is not None}
        unmet = [f"{name} needs num_workers > 0" for name, used in needs_workers.items() if used and self.num_workers == 0]
        if self.compile_step and self.capture_step:
            unmet.append("compile_step and capture_step are two ways to run the same whole step: turn one off")
        if self.eval_every == 0 and self.eval_every_samples is not None:  # else the samples' interval, silently
            unmet.append("eval_every 0 evaluates only at the end and eval_every_samples every so many samples: set "
                         "eval_every_samples to null to evaluate only at the end, or drop eval_every")
        if self.early_stopping_patience is not None and self.eval_interval_steps == 0:  # one evaluation: never stops early
            unmet.append("early_stopping_patience counts evaluations, and eval_every 0 evaluates only at the end: set "
                         "eval_every (or eval_every_samples) above 0, or early_stopping_patience to null")
        if unmet:
            raise ValueError("; ".join(unmet))
        return self

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(cls.model_fields)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each field's default, as ``TrainConfig()`` would hold it."""
        return {name: field.default for name, field in cls.model_fields.items()}

    def to_dict(self) -> dict[str, Any]:
        """The fields by name, values as given: what trials and checkpoints store."""
        return {name: getattr(self, name) for name in type(self).model_fields}

    def stop_metric(self, task: str) -> str:
        """The metric early stopping watches on ``task``'s data: ``early_stopping_metric``, else the task's first.

        Raises ``ValueError`` when ``early_stopping_metric`` is not measured on ``task``'s data.
        """
        measured = TASK_METRICS[task]
        if self.early_stopping_metric is not None and self.early_stopping_metric not in measured:
            raise ValueError(
                f"early_stopping_metric {self.early_stopping_metric!r} is not measured for {task} data; use one of {', '.join(measured)}"
            )
        return self.early_stopping_metric or measured[0]

    @property
    def eval_interval_steps(self) -> int:
        """Optimizer steps between evaluations (0: only at the end), from whichever of the two is set."""
        if self.eval_every_samples is None:
            return self.eval_every
        return max(1, nearest_step(self.eval_every_samples / (self.batch_size * self.grad_accum_steps)))

    def replace(self, **changes: Any) -> TrainConfig:
        """This config with ``changes``, validated again (``model_copy(update=...)`` would not be)."""
        return type(self)(**{**self.to_dict(), **changes})


def _explain(config: type[TrainConfig], err: ValidationError) -> str:
    """``err`` as one line, each bad field once, in the field order: ``batch_size must be >= 1; ...``."""
    return "; ".join(dict.fromkeys(_problem(config, error) for error in err.errors()))


def _problem(config: type[TrainConfig], error: ErrorDetails) -> str:
    if error["type"] == "value_error":  # this module's validators, already phrased for the user
        return str(error["ctx"]["error"])
    name = str(error["loc"][0])
    if error["type"] == "extra_forbidden":
        return f"{name} is not a TrainConfig field"
    field = config.model_fields[name]
    kinds = _union_members(field.annotation)
    if error["type"] == "string_pattern_mismatch":
        return f"{name} must not be empty"
    if error["type"] == "finite_number":
        return f"{name} must be a finite number, got {error['input']!r}"
    if error["type"] == "literal_error":
        rule = "one of " + ", ".join(str(c) for kind in kinds if get_origin(kind) is Literal for c in get_args(kind))
    elif error["type"] in _BOUND_ERRORS:
        rule = _bounds(field.metadata)
    else:  # a value of the wrong type: name the type, as annotated
        return f"{name} must be {' | '.join(_type_name(kind) for kind in kinds)}, got {error['input']!r}"
    return f"{name} must be {rule}" + (f" or null{_NULL_MEANS.get(name, '')}" if type(None) in kinds else "")


def _union_members(annotation: Any) -> tuple[Any, ...]:
    return get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)


def _type_name(kind: Any) -> str:
    if get_origin(kind) is Annotated:  # Number: named by its type, float
        kind = get_args(kind)[0]
    return "None" if kind is type(None) else kind.__name__


def _bounds(metadata: list[Any]) -> str:
    """``>= 1``, ``> 0`` or ``in [0, 1)``, from a field's ``Field(ge=..., lt=...)``."""
    low = next((m for m in metadata if isinstance(m, (Ge, Gt))), None)
    high = next((m for m in metadata if isinstance(m, (Le, Lt))), None)
    if low is not None and high is not None:
        return f"in {'[' if isinstance(low, Ge) else '('}{_limit(low)}, {_limit(high)}{']' if isinstance(high, Le) else ')'}"
    bound = low if low is not None else high
    return f"{_SIGNS[type(bound)]} {_limit(bound)}"


def _limit(bound: Ge | Gt | Le | Lt) -> Any:
    return getattr(bound, type(bound).__name__.lower())  # Ge(ge=1).ge, Lt(lt=1).lt, ...
