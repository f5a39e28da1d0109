"""The trained model as a deliverable: weights and tokenizer in ``save_pretrained`` format.

A LoRA run saves the merged model: the adapters folded into the weights they adapt and the
trained head in place of the frozen one, so the directory loads with plain
``AutoModelForSequenceClassification.from_pretrained``, without peft. The tokenizer is saved
with ``model_max_length`` at the length the trial cut texts at (``max_length: auto`` resolved), so
``tokenizer(texts, truncation=True)`` and pipelines read the texts as the trial's evaluation did.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_logger = logging.getLogger(__name__)


def merge_lora(model: torch.nn.Module) -> torch.nn.Module:
    """Fold LoRA layers into their base layers and unwrap trained heads, in place; returns ``model``."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import ModulesToSaveWrapper

    replaced: list[str] = []
    for name, module in list(model.named_modules()):
        if any(name.startswith(f"{done}.") for done in replaced):
            continue  # inside a layer already swapped out
        if isinstance(module, BaseTunerLayer):
            module.merge()
            replacement = module.get_base_layer()
        elif isinstance(module, ModulesToSaveWrapper):
            replacement = next(iter(module.modules_to_save.values()))  # the trained copy of the head
        else:
            continue
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, replacement)
        replaced.append(name)
    return model


def save_final_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path, *, lora: bool, max_length: int) -> bool:
    """Write ``model`` (merged when ``lora``) and ``tokenizer`` (its ``model_max_length`` the trial's ``max_length``)
    to ``directory`` with ``save_pretrained``. The tokenizer is the worker's shared one: its saved config is edited, never it.

    A full or read-only disk costs the saved model, not the trial: one warning, and False.
    """
    if lora:
        model = merge_lora(model)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        config_file = directory / "tokenizer_config.json"
        config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "model_max_length": max_length}, indent=2))
    except (OSError, RuntimeError) as err:  # torch.save reports a full disk as RuntimeError
        _logger.warning("the trained model was not saved to %s: %s", directory, err)
        return False
    return True
