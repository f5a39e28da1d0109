"""The executor's input: one plain, validated configuration per trial."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trial_executor._precisions import PRECISION_ALIASES, PRECISIONS

# Plain names, here rather than beside the code that uses them, so that reading a config
# (the orchestrator, read-only commands) does not import torch.
# What the labels ask of the model, and what each kind of task is measured by (the first: the
# default early-stopping metric). Regression and multi-label metrics: trial_executor._metrics.
TASKS: tuple[str, ...] = ("classification", "regression", "multi_label")
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "macro_f1", "loss"),
    "regression": ("rmse", "pearson", "spearman", "loss"),
    "multi_label": ("micro_f1", "macro_f1", "subset_accuracy", "loss"),
}
METRICS: tuple[str, ...] = tuple(dict.fromkeys(m for names in TASK_METRICS.values() for m in names))
MINIMIZED_METRICS: tuple[str, ...] = ("loss", "rmse")
LR_SCHEDULES: tuple[str, ...] = ("linear", "cosine", "constant")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
# Below this size a model's per-call overhead outweighs the padding that chunking saves
# (measured: tiny-bert 0.3M params loses ~35% in bf16, minilm-l6 22M params gains ~40%).
CHUNKING_MIN_PARAMS = 5_000_000
_ACCEPTED_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}
FINETUNE_MODES: tuple[str, ...] = ("full", "lora")


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs besides the data.

    ``eval_every`` counts optimizer steps (0: evaluate only at the end); early evaluations run on
    ``eval_sample_size`` validation rows, the same seeded sample in every trial (``None``, or a
    split no larger: every row), the final one on every row; ``max_steps`` caps
    optimizer steps across epochs (``None``: run every epoch in full). The effective batch is
    ``batch_size * grad_accum_steps``. ``length_grouping`` batches texts of similar length
    (see :mod:`trial_executor._batching`); ``chunk_by_length`` computes each batch in
    length-sorted chunks (same rows and gradient, less padding; ``None``: only for models of
    ``CHUNKING_MIN_PARAMS`` or more that run the HF forward, where it was measured to pay);
    ``packed_forward`` computes BERT classifiers on real tokens only (the same function; see
    :mod:`trial_executor._packed`; other architectures run their own forward); ``cache_dir`` holds
    tokenized data shared across trials and processes (``None``: no disk cache).
    ``buckets`` pads each batch up to one of a few widths (static shapes for compiled or captured
    steps); ``varlen_attention`` runs the packed forward's attention through FlashAttention's varlen
    kernel (CUDA fp16/bf16; no attention-probability dropout). ``None`` for ``chunk_by_length``,
    ``packed_forward``, ``buckets``, ``torch_compile`` and ``varlen_attention`` takes the device's
    default (:mod:`trial_executor._defaults`, the one place that decides them).
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
    """

    model: str = "tiny-bert"
    fp_precision: str = "fp32"
    batch_size: int = 32
    learning_rate: float = 1e-3
    epochs: int = 1
    max_steps: int | None = None
    max_length: int | str = 64
    max_length_percentile: float = 99.5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    lr_schedule: str = "linear"
    grad_accum_steps: int = 1
    max_grad_norm: float | None = 1.0
    eval_every: int = 50
    eval_batch_size: int = 256
    eval_sample_size: int | None = 512
    seed: int = 0
    device: str = "auto"
    cudnn_benchmark: bool = False
    length_grouping: bool = False
    chunk_by_length: bool | None = None
    torch_compile: bool | None = None
    packed_forward: bool | None = None
    buckets: bool | None = None
    varlen_attention: bool | None = None
    max_skipped_steps: int = 20
    cache_dir: str | None = None
    finetune: str = "full"
    lora_rank: int = 8
    lora_alpha: float | None = None
    lora_dropout: float = 0.1
    lora_target_modules: str | None = None
    gradient_checkpointing: bool = False
    early_stopping_patience: int | None = None
    early_stopping_metric: str | None = None
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None

    def __post_init__(self) -> None:
        if self.fp_precision in PRECISION_ALIASES:
            object.__setattr__(self, "fp_precision", PRECISION_ALIASES[self.fp_precision])
        problems = []
        for f in dataclasses.fields(self):
            value, annotation = getattr(self, f.name), str(f.type)
            kinds = annotation.split(" | ")
            if value is None and "None" in kinds:
                continue
            want = tuple(t for kind in kinds if kind != "None" for t in _ACCEPTED_TYPES[kind])
            # bool is an int subclass: a YAML ``true`` must not pass as a batch size.
            if not isinstance(value, want) or (isinstance(value, bool) and bool not in want):
                problems.append(f"{f.name} must be {annotation}, got {value!r}")
        if problems:
            raise ValueError("; ".join(problems))
        checks = [
            (self.fp_precision in PRECISIONS, f"fp_precision must be one of {', '.join(PRECISIONS)}"),
            (self.lr_schedule in LR_SCHEDULES, f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}"),
            (self.device in DEVICES, f"device must be one of {', '.join(DEVICES)}"),
            (self.batch_size >= 1, "batch_size must be >= 1"),
            (self.eval_batch_size >= 1, "eval_batch_size must be >= 1"),
            (self.eval_sample_size is None or self.eval_sample_size >= 1, "eval_sample_size must be >= 1 or null (every row)"),
            (self.learning_rate > 0, "learning_rate must be > 0"),
            (self.epochs >= 1, "epochs must be >= 1"),
            (self.max_steps is None or self.max_steps >= 1, "max_steps must be >= 1 or null"),
            (self.max_length == "auto" or (isinstance(self.max_length, int) and self.max_length >= 8),
             "max_length must be an int >= 8 or 'auto'"),
            (0 < self.max_length_percentile <= 100, "max_length_percentile must be in (0, 100]"),
            (self.finetune in FINETUNE_MODES, f"finetune must be one of {', '.join(FINETUNE_MODES)}"),
            (self.lora_rank >= 1, "lora_rank must be >= 1"),
            (self.lora_alpha is None or self.lora_alpha > 0, "lora_alpha must be > 0 or null (2 x lora_rank)"),
            (0 <= self.lora_dropout < 1, "lora_dropout must be in [0, 1)"),
            (self.lora_target_modules is None or bool(self.lora_target_modules.strip()), "lora_target_modules must not be empty"),
            (self.early_stopping_patience is None or self.early_stopping_patience >= 1, "early_stopping_patience must be >= 1 or null"),
            (self.early_stopping_metric is None or self.early_stopping_metric in METRICS,
             f"early_stopping_metric must be one of {', '.join(METRICS)} or null"),
            (self.num_workers >= 0, "num_workers must be >= 0"),
            (self.prefetch_factor is None or self.prefetch_factor >= 1, "prefetch_factor must be >= 1 or null"),
            (self.num_workers > 0 or not self.persistent_workers, "persistent_workers needs num_workers > 0"),
            (self.num_workers > 0 or self.prefetch_factor is None, "prefetch_factor needs num_workers > 0"),
            (self.weight_decay >= 0, "weight_decay must be >= 0"),
            (0 <= self.warmup_ratio < 1, "warmup_ratio must be in [0, 1)"),
            (self.grad_accum_steps >= 1, "grad_accum_steps must be >= 1"),
            (self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm must be > 0 or null"),
            (self.eval_every >= 0, "eval_every must be >= 0"),
            (self.max_skipped_steps >= 1, "max_skipped_steps must be >= 1"),
            (bool(self.model.strip()), "model must not be empty"),
        ]
        failed = [message for ok, message in checks if not ok]
        if failed:
            raise ValueError("; ".join(failed))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
