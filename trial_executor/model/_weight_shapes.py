"""A local directory's weights have the shapes its config gives the model's body.

``from_pretrained`` runs with ``ignore_mismatched_sizes`` so that a checkpoint's head of another
size (other labels) is replaced by a new one. It applies to every weight, though: a config whose
``vocab_size`` (or any size) was changed without saving the weights again would load with those
weights re-initialised at random, and trials would train from them without a word. The body (the
model's ``base_model_prefix`` part) is compared here, before a study is written: only the head
may differ. Read from the safetensors headers, or a ``torch.save`` file mapped, not read.

A head saved in the checkpoint for another number of labels than the data's would be replaced the
same way: :func:`check_head_fits` refuses it once the data is known (the body saved alone trains a new head).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PretrainedConfig


Header = Callable[[Path], dict[str, dict[str, object]]]


def body_shape_problem(path: Path, config: PretrainedConfig, files: Iterable[str], header: Header) -> str | None:
    """The first body weight in ``files`` (of ``path``) whose shape is not the one ``config`` builds, said in words; or ``None``.

    ``header`` reads a safetensors file's tensors (``_source._safetensors_header``, which checked the files whole).
    """
    for key, saved, expected, in_body in _mismatches(path, config, files, header):
        if in_body:
            return f"{key} is {saved} in the weights but {expected} by its config.json"
    return None


def check_head_fits(model: str, num_labels: int) -> None:
    """Raise ``ModelNotFoundError`` when local directory ``model`` holds a trained head for other than ``num_labels`` outputs."""
    from trial_executor.model._source import ModelNotFoundError, _check_weights, _safetensors_header, resolve_model, saved_config

    source = resolve_model(model)
    path = Path(source.path)
    if source.preset or not path.is_dir():
        return
    saved = saved_config(source.path, source.signature)
    config = copy.deepcopy(saved)
    config.num_labels = num_labels
    if not any(not in_body for *_, in_body in _mismatches(path, config, _check_weights(path), _safetensors_header)):
        return
    labels = ", ".join(str(name) for _, name in sorted((saved.id2label or {}).items()))
    raise ModelNotFoundError(
        f"model directory {path} has a head trained for {saved.num_labels} labels ({labels}), and the data has {num_labels}; "
        f"to train a new head on its body, save the body alone (AutoModel.from_pretrained(dir).save_pretrained(new_dir), "
        "its tokenizer beside it) and pass new_dir"
    )


def _mismatches(path: Path, config: PretrainedConfig, files: Iterable[str], header: Header) -> list[tuple[str, list[int], list[int], bool]]:
    """Each saved tensor whose shape is not the one ``config`` builds: its name, both shapes, whether it is in the body."""
    from transformers import AutoModelForSequenceClassification

    try:
        with torch.device("meta"):
            built = AutoModelForSequenceClassification.from_config(copy.deepcopy(config))
    except Exception:  # an architecture that cannot be built without weights: left to from_pretrained, as before
        return []
    prefix = f"{built.base_model_prefix}."
    expected = {name: list(t.shape) for name, t in built.state_dict().items()}
    found = []
    for file in sorted(files):
        for name, shape in _saved_shapes(path / file, header):
            key = name if name in expected else f"{prefix}{name}"  # a bare base model saves its weights without the prefix
            if key in expected and shape != expected[key]:
                found.append((key, shape, expected[key], key.startswith(prefix)))
    return found


def _saved_shapes(file: Path, header: Header) -> list[tuple[str, list[int]]]:
    if file.suffix == ".safetensors":
        return [(name, list(t["shape"])) for name, t in header(file).items() if name != "__metadata__"]  # type: ignore[call-overload]
    try:
        state = torch.load(file, map_location="meta", mmap=True, weights_only=True)
    except Exception:  # an old pickle-format file cannot be mapped; from_pretrained reads it as it is
        return []
    return [(name, list(t.shape)) for name, t in state.items() if isinstance(t, torch.Tensor)]
