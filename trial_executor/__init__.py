"""Runs one training trial from a plain config; knows nothing of Optuna.

The config, data and result types are imported here directly. The names whose modules import
torch (seconds at start-up) are deferred: they are imported on first use, through ``__getattr__``
below, so that reading a search space or a study never pays for torch. ``hpo/__init__.py`` does
the same for its own torch-bound names, and ``model/__init__.py`` for transformers' modeling code
(a model name is checked without it); those three tables are the only deferred imports of the
project. Type checkers and editors read the deferred names from the ``TYPE_CHECKING`` blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trial_executor._caches import clear_caches
from trial_executor._config import (
    DEVICES,
    METRICS,
    MINIMIZED_METRICS,
    PRECISION_ALIASES,
    PRECISIONS,
    SEED_RANGE,
    TASK_METRICS,
    TASKS,
    TrainConfig,
)
from trial_executor._deferred import deferred_names
from trial_executor._failures import NonFiniteLossError, TrialInterrupted, TrialOutOfMemoryError, UnsupportedPrecisionError
from trial_executor._heap import heap_frozen
from trial_executor._precisions import MIXED_PRECISION
from trial_executor._result import CPU_CONTENDED_ABOVE, ProgressFn, StepProgress, TrialResult
from trial_executor.data import (
    HOLDOUTS,
    DataError,
    TextClassificationData,
    demo_dataset,
    hold_out_size,
    load_text_classification,
    make_synthetic_reviews,
)
from trial_executor.model import PRESETS, ModelLimitError, ModelNotFoundError, check_max_length, check_model_name

if TYPE_CHECKING:
    from trial_executor.device import hardware_metadata, memory_in_use_mb, resolve_device, total_memory_mb
    from trial_executor.model import LoraUnavailableError
    from trial_executor.model import peft_available as lora_available
    from trial_executor.precision import PrecisionPolicy, precision_support, tf32_enabled
    from trial_executor.train import (
        CHECKPOINT_FILE,
        STOPPED_EARLY_STOPPING,
        STOPPED_PRUNED,
        Checkpointing,
        ReportFn,
        UnusableCheckpointError,
        run_trial,
    )

# The deferred (torch-bound) names, by module: the same names as the block above.
_TORCH_BOUND = {
    "trial_executor.train._checkpoint": ("CHECKPOINT_FILE", "Checkpointing", "UnusableCheckpointError"),
    "trial_executor.device._hardware": ("hardware_metadata", "memory_in_use_mb", "resolve_device", "total_memory_mb"),
    "trial_executor.model._lora": ("LoraUnavailableError", "lora_available"),
    "trial_executor.train._loop": ("STOPPED_EARLY_STOPPING", "STOPPED_PRUNED", "ReportFn", "run_trial"),
    "trial_executor.precision._policy": ("PrecisionPolicy", "precision_support", "tf32_enabled"),
}
__getattr__ = deferred_names(globals(), _TORCH_BOUND, renamed={"lora_available": "peft_available"})


__all__ = [
    "CHECKPOINT_FILE",
    "CPU_CONTENDED_ABOVE",
    "DEVICES",
    "HOLDOUTS",
    "METRICS",
    "MINIMIZED_METRICS",
    "MIXED_PRECISION",
    "PRECISIONS",
    "PRECISION_ALIASES",
    "PRESETS",
    "SEED_RANGE",
    "STOPPED_EARLY_STOPPING",
    "STOPPED_PRUNED",
    "TASKS",
    "TASK_METRICS",
    "Checkpointing",
    "DataError",
    "LoraUnavailableError",
    "ModelLimitError",
    "ModelNotFoundError",
    "NonFiniteLossError",
    "PrecisionPolicy",
    "ProgressFn",
    "ReportFn",
    "StepProgress",
    "TextClassificationData",
    "TrainConfig",
    "TrialInterrupted",
    "TrialOutOfMemoryError",
    "TrialResult",
    "UnsupportedPrecisionError",
    "UnusableCheckpointError",
    "check_max_length",
    "check_model_name",
    "clear_caches",
    "demo_dataset",
    "hardware_metadata",
    "heap_frozen",
    "hold_out_size",
    "load_text_classification",
    "lora_available",
    "make_synthetic_reviews",
    "memory_in_use_mb",
    "precision_support",
    "resolve_device",
    "run_trial",
    "tf32_enabled",
    "total_memory_mb",
]
