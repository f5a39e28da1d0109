"""The data a run trains on: a file read with the data flags, a dataset given in Python, or the demo reviews."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hpo._errors import UserError
from trial_executor import HOLDOUTS, TextClassificationData, demo_dataset, hold_out_size, load_text_classification

DataLike = str | Path | TextClassificationData | None
T = TypeVar("T")

# The demo reviews and the --valid-fraction hold-out are drawn with this seed, not with --seed: a
# study's data stays the same whatever seed a run or a retrain of its best trial passes.
DATA_SEED = 0
# The hold-out of a study whose stored data flags name none: made before --holdout, it drew rows at random.
EARLIER_HOLDOUT = HOLDOUTS[1]  # random


class OtherDataError(UserError):
    """A study opened on data other than its own (another fingerprint); ``source``: the data flags it stored, if any."""

    def __init__(self, message: str, source: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.source = source


def resolve_data(
    data: DataLike = None, *, text_column: str = "text", label_column: str = "label",
    text_pair_column: str | None = None, valid_data: str | Path | None = None, valid_fraction: float = 0.1,
    holdout: str | None = None, empty_text: str = "drop", task: str = "auto", warn: bool = True,
) -> TextClassificationData:
    """Loaded data: a CSV/TSV/JSONL file or save_to_disk directory, a :class:`TextClassificationData`, or the demo set.

    ``holdout`` ``None`` is the default, stratified (see :func:`its_own_holdout` for a study's own). Rows dropped for
    their empty text, and validation rows that repeat training rows, are said on stderr unless ``warn`` is false (a file
    read again, already said).

    ``task`` (the space's ``task:``) is what the labels are for; ``auto`` reads it from them.
    """
    if data is not None and not isinstance(data, (str, Path, TextClassificationData)):
        raise UserError(f"data must be a file path, a TextClassificationData or None (the demo reviews), got a {type(data).__name__}; pass one of them")
    flags = {"valid_data": valid_data, "text_column": text_column, "label_column": label_column,
             "text_pair_column": text_pair_column, "valid_fraction": valid_fraction, "holdout": holdout,
             "empty_text": empty_text}
    named = [name for name, value in flags.items() if value != resolve_data.__kwdefaults__[name]]
    if named and data is None:  # the demo reviews: a data flag given would be silently ignored
        raise UserError(f"--{named[0].replace('_', '-')} needs --data; pass the training file too")
    if named and isinstance(data, TextClassificationData):  # only Python gives both: name the argument, not a flag
        raise UserError(f"{named[0]} reads a data file, and the data given is a TextClassificationData with its splits "
                        f"already made; drop {named[0]}, or pass the file as data")
    if data is None or isinstance(data, TextClassificationData):
        given = demo_dataset(seed=DATA_SEED) if data is None else data
        if task not in ("auto", given.task):
            what = "the demo reviews are" if data is None else "the data given is"
            raise UserError(f"the space says task: {task} but {what} {given.task} data; pass --data with {task} labels")
        return given
    loaded = load_text_classification(
        str(data), text_column=text_column, label_column=label_column, text_pair_column=text_pair_column,
        valid_path=None if valid_data is None else str(valid_data), valid_fraction=valid_fraction, seed=DATA_SEED,
        holdout=holdout or HOLDOUTS[0], empty_text=empty_text, task=task,
    )
    if loaded.dropped_empty and warn:
        print(f"warning: dropped {loaded.dropped_empty} rows with empty text (pass --empty-text fail to refuse them)", file=sys.stderr)
    held, rows = len(loaded.valid_texts), len(loaded.train_texts) + len(loaded.valid_texts)
    if warn and valid_data is None and held < (asked := hold_out_size(rows, valid_fraction)):
        print(f"warning: --valid-fraction {valid_fraction} held out {held} of {rows} rows, not {asked}: "
              "a stratified hold-out keeps a row of each class for training", file=sys.stderr)
    if warn and (seen := loaded.valid_rows_seen_in_training):  # counted only where it is said: not in each worker
        where = "the --valid-data file" if valid_data is not None else f"the --valid-fraction hold-out ({data} repeats them)"
        print(f"warning: {seen} of {len(loaded.valid_texts)} validation rows of {where} are also training rows, text for text: "
              "their scores measure recall more than unseen text; remove the repeats to score unseen text only", file=sys.stderr)
    return loaded


# The data flags a study stores (DATA_SOURCE_ATTR) besides the file: resolve_data's keyword arguments.
SOURCE_FLAGS = ("text_column", "label_column", "text_pair_column", "valid_data", "valid_fraction", "holdout", "empty_text")


def data_source_of(data: DataLike, options: dict[str, Any], task: str = "classification") -> dict[str, Any] | None:
    """What to store as the study's data: the file (absolute path) and ``options``' data flags, ``{}`` for the
    demo reviews, ``None`` for a dataset given in Python (no flags can name it). ``task``: the data's; only
    classification is held out by class, so the holdout stored for any other is the random one its rows were."""
    if isinstance(data, TextClassificationData):
        return None
    if data is None:
        return {}
    valid = options.get("valid_data")
    holdout = (options.get("holdout") or HOLDOUTS[0]) if task == "classification" else HOLDOUTS[1]
    return {"data": str(Path(data).resolve()), **{k: options.get(k) for k in SOURCE_FLAGS},
            "valid_data": None if valid is None else str(Path(valid).resolve()), "holdout": holdout}


def its_own_holdout(source: dict[str, Any] | None) -> str | None:
    """How the study whose stored data flags are ``source`` held out its validation rows; ``None`` where nothing was held
    out of a file (the demo reviews, a ``--valid-data`` file). A study made before ``--holdout``, or before data flags
    were stored (``source`` ``None``; data given in Python stores none either), drew at random: for those, a try that
    the data's fingerprint confirms or refuses."""
    if source is None:
        return EARLIER_HOLDOUT
    if not source or source.get("valid_data") is not None:
        return None
    return source.get("holdout") or EARLIER_HOLDOUT


def data_flags(source: dict[str, Any]) -> str:
    """``source`` (:func:`data_source_of`) as the command-line flags that read that data again."""
    if not source:
        return "no --data (the demo reviews)"
    flags = [("--data", source["data"]), ("--text-column", source["text_column"]), ("--label-column", source["label_column"])]
    if source.get("text_pair_column"):
        flags.append(("--text-pair-column", source["text_pair_column"]))
    if source.get("valid_data"):
        flags.append(("--valid-data", source["valid_data"]))
    else:
        if source.get("valid_fraction") not in (None, 0.1):
            flags.append(("--valid-fraction", str(source["valid_fraction"])))
        if (holdout := its_own_holdout(source)) != HOLDOUTS[0]:
            flags.append(("--holdout", holdout))
    if source.get("empty_text") not in (None, "drop"):
        flags.append(("--empty-text", source["empty_text"]))
    return " ".join(f"{flag} {shlex.quote(str(value))}" for flag, value in flags)


def stored_data(source: dict[str, Any] | None, options: dict[str, Any]) -> tuple[DataLike, dict[str, Any]]:
    """The data a study stored (:func:`data_source_of`) and ``options`` with its flags: ``(None, options)`` when it stored none."""
    if not source:
        return None, options
    for path in (source["data"], source.get("valid_data")):
        if path is not None and not Path(path).exists():
            raise UserError(f"the study ran with {data_flags(source)}, but {path} is not on this machine; "
                            "pass --data (and its flags) with a copy of that data")
    flags = {k: source.get(k, options.get(k)) for k in SOURCE_FLAGS}
    return source["data"], {**options, **flags, "holdout": its_own_holdout(source)}


def on_its_own_holdout(
    open_on: Callable[[TextClassificationData, dict[str, Any] | None], T], data: TextClassificationData,
    source: dict[str, Any] | None, holdout: str | None, task: str,
) -> tuple[T, TextClassificationData]:
    """``open_on(data, source)``: a study opened on this run's data and data flags, and that data. Where the study says it
    was made on other data (:class:`OtherDataError`) and the run gave no ``--holdout`` (``holdout`` is ``None``), this
    run's file is held out again as the study's was (one made before that flag: at random), and opened on that."""
    try:
        return open_on(data, source), data
    except OtherDataError as err:
        own, this_run = its_own_holdout(err.source), None if source is None else its_own_holdout(source)
        if holdout is not None or None in (own, this_run) or own == this_run:
            raise
        again = {**source, "holdout": own}  # type: ignore[dict-item]  # this_run: a file's flags
        data = resolve_data(again["data"], task=task, warn=False, **{k: again[k] for k in SOURCE_FLAGS})
        try:
            return open_on(data, again), data
        except OtherDataError:
            raise err from None  # other data however it is held out: the first refusal names what the study ran with
