"""Runs one training trial from a plain config; knows nothing of Optuna."""

from trial_executor._checkpoint import CHECKPOINT_FILE, Checkpointing, TrialInterrupted
from trial_executor._config import PRECISION_ALIASES, TrainConfig
from trial_executor._data import DataError, TextClassificationData, load_text_classification
from trial_executor._failures import NonFiniteLossError, TrialOutOfMemoryError
from trial_executor._hardware import hardware_metadata, resolve_device
from trial_executor._loop import STOPPED_EARLY_STOPPING, STOPPED_PRUNED, ReportFn, run_trial
from trial_executor._lora import LoraUnavailableError
from trial_executor._lora import peft_available as lora_available
from trial_executor._metrics import METRICS
from trial_executor._models import PRESETS, ModelNotFoundError, check_model_name
from trial_executor._precision import PRECISIONS, PrecisionPolicy, UnsupportedPrecisionError, precision_support, tf32_enabled
from trial_executor._result import TrialResult
from trial_executor._synthetic import demo_dataset, make_synthetic_reviews

__all__ = [
    "CHECKPOINT_FILE",
    "METRICS",
    "PRECISIONS",
    "PRECISION_ALIASES",
    "PRESETS",
    "STOPPED_EARLY_STOPPING",
    "STOPPED_PRUNED",
    "Checkpointing",
    "DataError",
    "LoraUnavailableError",
    "ModelNotFoundError",
    "NonFiniteLossError",
    "PrecisionPolicy",
    "ReportFn",
    "TextClassificationData",
    "TrainConfig",
    "TrialInterrupted",
    "TrialOutOfMemoryError",
    "TrialResult",
    "UnsupportedPrecisionError",
    "check_model_name",
    "demo_dataset",
    "hardware_metadata",
    "load_text_classification",
    "lora_available",
    "make_synthetic_reviews",
    "precision_support",
    "resolve_device",
    "run_trial",
    "tf32_enabled",
]
