"""The model: names resolved once per trial, loading by name or directory, the worker's pretrained cache, LoRA, saving, and the forward a trial trains through.

Checking a model name (``_source``) reads configs, never modeling code: a preset, an alias or
a name found nowhere imports neither transformers nor torch; a directory or a cached hub id
imports transformers' config code (and with it torch) to read its config. The other names
import torch (whether varlen attention can run, ``_varlen``) or the modeling code (seconds at
start-up) and are imported on first use, through ``__getattr__`` below, so a process that only
checks names (a study's driver, ``--workers`` and Ray parents, a bad ``--model``, ``hpo
check``'s flags) never pays for them. Type checkers read them from the ``TYPE_CHECKING`` block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trial_executor._deferred import deferred_names
from trial_executor.model._fingerprint import model_files
from trial_executor.model._source import (
    PRESETS,
    ModelLimitError,
    ModelNotFoundError,
    ModelSource,
    check_max_length,
    check_model_name,
    checkpoint_dtype,
    local_model_directory,
    resolve_model,
    usable_positions,
)

if TYPE_CHECKING:
    from trial_executor.model._forward import (
        PaddingMaskForward,
        enable_activation_checkpointing,
        select_forward,
        uses_token_types,
    )
    from trial_executor.model._loading import load_model, preload_model, train_wordpiece_tokenizer
    from trial_executor.model._lora import (
        INSTALL_HINT,
        LoraUnavailableError,
        apply_lora,
        load_trainable_state_dict,
        lora_target_problem,
        parameter_counts,
        peft_available,
        trainable_state_dict,
    )
    from trial_executor.model._packed import PackedBertClassifier, supports_packed_forward
    from trial_executor.model._saving import save_final_model
    from trial_executor.model._varlen import varlen_attention_available

# The deferred (torch and modeling-code) names, by module: the same names as the block above.
_MODELING = {
    "trial_executor.model._forward": ("PaddingMaskForward", "enable_activation_checkpointing", "select_forward", "uses_token_types"),
    "trial_executor.model._loading": ("load_model", "preload_model", "train_wordpiece_tokenizer"),
    "trial_executor.model._lora": ("INSTALL_HINT", "LoraUnavailableError", "apply_lora", "load_trainable_state_dict", "lora_target_problem",
                                   "parameter_counts", "peft_available", "trainable_state_dict"),
    "trial_executor.model._packed": ("PackedBertClassifier", "supports_packed_forward"),
    "trial_executor.model._saving": ("save_final_model",),
    "trial_executor.model._varlen": ("varlen_attention_available",),
}
__getattr__ = deferred_names(globals(), _MODELING)


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
    "local_model_directory",
    "lora_target_problem",
    "model_files",
    "parameter_counts",
    "peft_available",
    "preload_model",
    "resolve_model",
    "save_final_model",
    "select_forward",
    "supports_packed_forward",
    "train_wordpiece_tokenizer",
    "trainable_state_dict",
    "usable_positions",
    "uses_token_types",
    "varlen_attention_available",
]
