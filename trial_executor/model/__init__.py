"""The model: names resolved once per trial, loading by name or directory, the worker's pretrained cache, LoRA, saving, and the forward a trial trains through.
"""

from __future__ import annotations

from trial_executor.model._forward import PaddingMaskForward, enable_activation_checkpointing, select_forward, uses_token_types
from trial_executor.model._loading import load_model, preload_model, train_wordpiece_tokenizer
from trial_executor.model._lora import (
    INSTALL_HINT,
    LoraUnavailableError,
    apply_lora,
    load_trainable_state_dict,
    parameter_counts,
    peft_available,
    trainable_state_dict,
)
from trial_executor.model._packed import PackedBertClassifier, supports_packed_forward, varlen_attention_available
from trial_executor.model._saving import save_final_model
from trial_executor.model._source import (
    PRESETS,
    ModelLimitError,
    ModelNotFoundError,
    ModelSource,
    check_max_length,
    check_model_name,
    checkpoint_dtype,
    resolve_model,
)

__all__ = [
    "INSTALL_HINT",
    "PRESETS",
    "LoraUnavailableError",
    "ModelLimitError",
    "ModelNotFoundError",
    "ModelSource",
    "PackedBertClassifier",
    "PaddingMaskForward",
    "apply_lora",
    "check_max_length",
    "check_model_name",
    "checkpoint_dtype",
    "enable_activation_checkpointing",
    "load_model",
    "load_trainable_state_dict",
    "parameter_counts",
    "peft_available",
    "preload_model",
    "resolve_model",
    "save_final_model",
    "select_forward",
    "supports_packed_forward",
    "train_wordpiece_tokenizer",
    "trainable_state_dict",
    "uses_token_types",
    "varlen_attention_available",
]
