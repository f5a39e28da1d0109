"""LoRA fine-tuning through ``peft``: adapters on the attention projections, the head trained in full.

``peft`` replaces the targeted ``nn.Linear`` modules inside the model with LoRA layers and
wraps the head (``modules_to_save``); the model keeps its class, so the loop trains it as
before (and :mod:`trial_executor.model._packed` calls the LoRA layers as modules). Only the
trainable parameters go into checkpoints: the frozen weights are rebuilt by loading the
model again (pretrained weights, or a preset's seeded random init).
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

from trial_executor._config import TrainConfig

INSTALL_HINT = "finetune: lora needs the optional package peft; install it with pip install 'precision-hpo[lora]'"

# model_type -> (attention projections LoRA adapts, modules trained in full: the head). BERT's
# pooler belongs to the head: sentence-embedding checkpoints (minilm-l6) never trained it.
TARGETS: dict[str, tuple[list[str], list[str]]] = {
    "bert": (["query", "value"], ["pooler.dense", "classifier"]),
    "distilbert": (["q_lin", "v_lin"], ["pre_classifier", "classifier"]),
}


class LoraUnavailableError(ImportError):
    """``finetune: lora`` without the ``peft`` package."""


def peft_available() -> bool:
    try:
        import peft  # noqa: F401
    except ImportError:
        return False
    return True


def apply_lora(model: PreTrainedModel, config: TrainConfig) -> PreTrainedModel:
    """``model`` with LoRA adapters injected in place; only adapters and head stay trainable."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise LoraUnavailableError(INSTALL_HINT) from None
    targets = lora_targets(model.config.model_type, config.lora_target_modules)
    if (problem := _targets_missing(model, config.model, targets)) is not None:  # not peft's error from deep inside
        raise ValueError(problem)
    head = TARGETS.get(model.config.model_type, (None, ["classifier", "score"]))[1]
    alpha = config.lora_alpha if config.lora_alpha is not None else 2 * config.lora_rank
    lora = LoraConfig(
        r=config.lora_rank, lora_alpha=alpha, lora_dropout=config.lora_dropout,
        target_modules=targets, modules_to_save=head, bias="none",
    )
    with warnings.catch_warnings():
        # peft reads transformers' deprecated is_gradient_checkpointing.
        warnings.simplefilter("ignore", FutureWarning)
        # The wrapper only routes calls; the base model now holds the LoRA layers itself.
        return get_peft_model(model, lora).get_base_model()


def lora_targets(model_type: str, target_modules: str | None) -> list[str]:
    """The module names LoRA adapts: ``target_modules`` (comma-separated), else the architecture's; ``ValueError`` without either."""
    if target_modules is not None:
        return [name.strip() for name in target_modules.split(",") if name.strip()]
    if model_type not in TARGETS:
        raise ValueError(
            f"finetune: lora has no default target modules for model type {model_type!r}; "
            "set lora_target_modules (comma-separated module names, e.g. q_proj,v_proj)"
        )
    return TARGETS[model_type][0]


def lora_target_problem(model: str, target_modules: str | None) -> str | None:
    """Why LoRA cannot adapt ``model`` with ``target_modules`` (``None``: the architecture's), or ``None``.

    Read from the model's modules built on the meta device (no weights, no memory): a name peft
    would not find fails every trial, so a run asks this before its study is written.
    """
    from transformers import AutoModelForSequenceClassification

    from trial_executor.model._source import PRESETS, resolve_model, saved_config

    source = resolve_model(model)
    # A copy of the shared config: from_config sets its dtype and attention.
    config = PRESETS[source.name](_PRESET_VOCAB) if source.preset else copy.deepcopy(saved_config(source.path, source.signature))
    try:
        targets = lora_targets(config.model_type, target_modules)
    except ValueError as err:
        return str(err)
    with torch.device("meta"):
        built = AutoModelForSequenceClassification.from_config(config)
    return _targets_missing(built, model, targets)


def _targets_missing(built: torch.nn.Module, model: str, targets: list[str]) -> str | None:
    """Which of ``targets`` name no module of ``built`` (the model called ``model``), as one line naming its linear layers."""
    names = [name for name, _ in built.named_modules()]
    missing = [t for t in targets if not any(name == t or name.endswith(f".{t}") for name in names)]  # peft's rule
    if not missing:
        return None
    linear = sorted({name.rsplit(".", 1)[-1] for name, m in built.named_modules() if isinstance(m, torch.nn.Linear)})
    return (f"lora_target_modules: {', '.join(missing)} names no module of model {model!r}; "
            f"name some of its linear layers ({', '.join(linear)})")


_PRESET_VOCAB = 1000  # a preset's vocabulary is fitted to the data; its module names do not depend on it


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """Trainable and total parameters (a LoRA model's frozen head copy counts as total only)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def trainable_state_dict(model: torch.nn.Module) -> dict[str, Any]:
    """The trainable parameters only, by their ``state_dict`` names."""
    names = {name for name, p in model.named_parameters() if p.requires_grad}
    return {name: tensor for name, tensor in model.state_dict().items() if name in names}


def load_trainable_state_dict(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Restore :func:`trainable_state_dict` onto a freshly built model; every trainable tensor must be there."""
    missing = {name for name, p in model.named_parameters() if p.requires_grad} - set(state)
    result = model.load_state_dict(state, strict=False)
    if missing or result.unexpected_keys:
        raise ValueError(
            f"checkpoint does not match the model's trainable parameters (missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(result.unexpected_keys)[:3]})"
        )
