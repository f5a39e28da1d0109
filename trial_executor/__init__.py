"""Runs one training trial from a plain config; knows nothing of Optuna.

Names are imported on first use: reading a search space or a study must not pay for torch.
"""

from __future__ import annotations

from trial_executor._lazy import lazy_exports

# name -> (module, name in that module)
_EXPORTS: dict[str, tuple[str, str]] = {
    "CHECKPOINT_FILE": ("trial_executor._checkpoint", "CHECKPOINT_FILE"),
    "METRICS": ("trial_executor._config", "METRICS"),
    "MINIMIZED_METRICS": ("trial_executor._config", "MINIMIZED_METRICS"),
    "PRECISIONS": ("trial_executor._config", "PRECISIONS"),
    "PRECISION_ALIASES": ("trial_executor._config", "PRECISION_ALIASES"),
    "PRESETS": ("trial_executor._models", "PRESETS"),
    "STOPPED_EARLY_STOPPING": ("trial_executor._loop", "STOPPED_EARLY_STOPPING"),
    "STOPPED_PRUNED": ("trial_executor._loop", "STOPPED_PRUNED"),
    "TASKS": ("trial_executor._config", "TASKS"),
    "TASK_METRICS": ("trial_executor._config", "TASK_METRICS"),
    "Checkpointing": ("trial_executor._checkpoint", "Checkpointing"),
    "DataError": ("trial_executor._data", "DataError"),
    "LoraUnavailableError": ("trial_executor._lora", "LoraUnavailableError"),
    "ModelLimitError": ("trial_executor._models", "ModelLimitError"),
    "ModelNotFoundError": ("trial_executor._models", "ModelNotFoundError"),
    "NonFiniteLossError": ("trial_executor._failures", "NonFiniteLossError"),
    "PrecisionPolicy": ("trial_executor._precision", "PrecisionPolicy"),
    "ProgressFn": ("trial_executor._loop", "ProgressFn"),
    "ReportFn": ("trial_executor._loop", "ReportFn"),
    "StepProgress": ("trial_executor._loop", "StepProgress"),
    "TextClassificationData": ("trial_executor._data", "TextClassificationData"),
    "TrainConfig": ("trial_executor._config", "TrainConfig"),
    "TrialInterrupted": ("trial_executor._checkpoint", "TrialInterrupted"),
    "TrialOutOfMemoryError": ("trial_executor._failures", "TrialOutOfMemoryError"),
    "TrialResult": ("trial_executor._result", "TrialResult"),
    "UnsupportedPrecisionError": ("trial_executor._precision", "UnsupportedPrecisionError"),
    "check_max_length": ("trial_executor._models", "check_max_length"),
    "check_model_name": ("trial_executor._models", "check_model_name"),
    "demo_dataset": ("trial_executor._synthetic", "demo_dataset"),
    "hardware_metadata": ("trial_executor._hardware", "hardware_metadata"),
    "load_text_classification": ("trial_executor._data", "load_text_classification"),
    "lora_available": ("trial_executor._lora", "peft_available"),
    "make_synthetic_reviews": ("trial_executor._synthetic", "make_synthetic_reviews"),
    "precision_support": ("trial_executor._precision", "precision_support"),
    "resolve_device": ("trial_executor._hardware", "resolve_device"),
    "run_trial": ("trial_executor._loop", "run_trial"),
    "tf32_enabled": ("trial_executor._precision", "tf32_enabled"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
