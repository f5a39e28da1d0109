"""Runs one training trial from a plain config; knows nothing of Optuna."""

from trial_executor._checkpoint import CHECKPOINT_FILE, Checkpointing, TrialInterrupted
from trial_executor._config import TrainConfig
from trial_executor._data import DataError, TextClassificationData, load_text_classification
from trial_executor._failures import NonFiniteLossError, TrialOutOfMemoryError
from trial_executor._hardware import hardware_metadata, resolve_device
from trial_executor._loop import ReportFn, run_trial
from trial_executor._metrics import METRICS
from trial_executor._models import PRESETS, ModelNotFoundError, check_model_name
from trial_executor._precision import PRECISIONS, PrecisionPolicy, UnsupportedPrecisionError, precision_support, tf32_enabled
from trial_executor._result import TrialResult
from trial_executor._synthetic import demo_dataset, make_synthetic_reviews

__all__ = [
    "CHECKPOINT_FILE",
    "METRICS",
    "PRECISIONS",
    "PRESETS",
    "Checkpointing",
    "DataError",
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
    "make_synthetic_reviews",
    "precision_support",
    "resolve_device",
    "run_trial",
    "tf32_enabled",
]
