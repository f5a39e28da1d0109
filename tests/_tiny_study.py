"""A tiny search space any study test runs in seconds, and what every trial a study records must carry."""

from __future__ import annotations

import optuna

TINY = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {
        "fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
        "learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True},
        "model": {"type": "categorical", "choices": ["tiny-bert", "tiny-distilbert"]},
    },
    "fixed": {"batch_size": 16, "max_steps": 4, "eval_every": 2, "max_length": 32},
}

HARDWARE_TYPES = {
    "host": str, "device_type": str, "device_name": str, "compute_capability": (str, type(None)),
    "total_memory_mb": int, "cuda_version": (str, type(None)), "cudnn_version": (str, type(None)),
    "driver_version": (str, type(None)), "torch_version": str, "transformers_version": str,
    "optuna_version": str, "bf16_supported": bool, "tf32_enabled": bool, "emulated_precisions": list,
}
NUMBER_ATTRS = ("throughput_samples_per_s", "throughput_tokens_per_s", "peak_memory_mb", "train_seconds",
                "memory_before_trial_mb", "memory_after_trial_mb")


def assert_trial_records(trial: optuna.trial.FrozenTrial) -> None:
    """Every required user_attr is present and typed."""
    attrs = trial.user_attrs
    assert set(HARDWARE_TYPES) <= set(attrs["hardware"])
    for key, kind in HARDWARE_TYPES.items():
        assert isinstance(attrs["hardware"][key], kind), (key, attrs["hardware"][key])
    assert attrs["hardware"]["device_type"] == "cpu"
    for key in NUMBER_ATTRS:
        assert isinstance(attrs[key], float) and attrs[key] > 0, key
    assert set(attrs["metrics"]) >= {"accuracy", "macro_f1", "loss"}
    assert attrs["precision_effective"] == trial.params["fp_precision"]
    assert attrs["hardware"]["tf32_enabled"] is False
    assert 0 < attrs["padding_efficiency"] <= 1
    assert attrs["tokenize_cache"] in ("hit", "miss") and attrs["tokenize_seconds"] >= 0
    assert trial.intermediate_values, "learning curve missing"
