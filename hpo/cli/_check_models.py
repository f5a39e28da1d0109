"""The random-init models ``hpo check`` times, by name: torch-free, so that its flags are read before torch loads.

Each entry builds a transformers config when called (transformers is imported then, not here):
``python -m hpo check --help`` and a mistyped ``--model`` answer in well under a second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trial_executor import PRESETS

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_SMALL_VOCAB = 8192


def _small_bert() -> PretrainedConfig:
    from transformers import BertConfig

    # Wide enough that matmuls, not per-op overhead, dominate a step (unlike tiny-bert's 64), shallow
    # enough that the default check takes seconds per precision on 2 CPU cores.
    return BertConfig(
        vocab_size=_SMALL_VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024
    )


def _bert_base() -> PretrainedConfig:
    from transformers import BertConfig

    return BertConfig()  # BertConfig's defaults are bert-base: 12 layers, 768 hidden, 110M parameters


# Random-init configs only: no download, and the weights do not change the speed of a step.
CHECK_MODELS: dict[str, Callable[[], PretrainedConfig]] = {
    **{name: (lambda build=build: build(_SMALL_VOCAB)) for name, build in PRESETS.items()},
    "small-bert": _small_bert,
    "bert-base-random": _bert_base,
}
DEFAULT_CHECK_MODEL = "small-bert"


def model_config(name: str) -> PretrainedConfig:
    """The config of check model ``name`` (a key of :data:`CHECK_MODELS`), with two labels."""
    config = CHECK_MODELS[name]()
    config.num_labels = 2
    return config
