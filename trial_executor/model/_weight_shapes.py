"""A local directory's weights have the shapes its config gives the model's body.

``from_pretrained`` runs with ``ignore_mismatched_sizes`` so that a checkpoint's head of another
size (other labels) is replaced by a new one. It applies to every weight, though: a config whose
``vocab_size`` (or any size) was changed without saving the weights again would load with those
weights re-initialised at random, and trials would train from them without a word. The body (the
model's ``base_model_prefix`` part) is compared here, before a study is written: only the head
may differ. Read from the safetensors headers, or a ``torch.save`` file mapped, not read.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def body_shape_problem(
    path: Path, config: PretrainedConfig, files: Iterable[str], header: Callable[[Path], dict[str, dict[str, object]]]
) -> str | None:
    """The first body weight in ``files`` (of ``path``) whose shape is not the one ``config`` builds, said in words; or ``None``.

    ``header`` reads a safetensors file's tensors (``_source._safetensors_header``, which checked the files whole).
    """
    from transformers import AutoModelForSequenceClassification

    with torch.device("meta"):
        built = AutoModelForSequenceClassification.from_config(copy.deepcopy(config))
    prefix = f"{built.base_model_prefix}."
    expected = {name.removeprefix(prefix): list(t.shape) for name, t in built.state_dict().items() if name.startswith(prefix)}
    for file in sorted(files):
        for name, shape in _saved_shapes(path / file, header):
            key = name.removeprefix(prefix)  # a bare base model saves its weights without the prefix
            if key in expected and shape != expected[key]:
                return f"{prefix}{key} is {shape} in the weights but {expected[key]} by its config.json"
    return None


def _saved_shapes(file: Path, header: Callable[[Path], dict[str, dict[str, object]]]) -> list[tuple[str, list[int]]]:
    if file.suffix == ".safetensors":
        return [(name, list(t["shape"])) for name, t in header(file).items() if name != "__metadata__"]  # type: ignore[call-overload]
    try:
        state = torch.load(file, map_location="meta", mmap=True, weights_only=True)
    except Exception:  # an old pickle-format file cannot be mapped; from_pretrained reads it as it is
        return []
    return [(name, list(t.shape)) for name, t in state.items() if isinstance(t, torch.Tensor)]
