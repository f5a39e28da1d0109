"""The data a run trains on: a file read with the data flags, a dataset given in Python, or the demo reviews."""

from __future__ import annotations

import sys
from pathlib import Path

from hpo._errors import UserError
from trial_executor import TextClassificationData, demo_dataset, load_text_classification

DataLike = str | Path | TextClassificationData | None


def resolve_data(
    data: DataLike = None, *, seed: int = 0, text_column: str = "text", label_column: str = "label",
    text_pair_column: str | None = None, valid_data: str | Path | None = None, valid_fraction: float = 0.1,
    empty_text: str = "drop", task: str = "auto",
) -> TextClassificationData:
    """Loaded data: a CSV/TSV/JSONL file or save_to_disk directory, a :class:`TextClassificationData`, or the demo set.

    ``task`` (the space's ``task:``) is what the labels are for; ``auto`` reads it from them.
    """
    if data is None and valid_data is not None:
        raise UserError("--valid-data needs --data; pass the training file too")
    if data is None or isinstance(data, TextClassificationData):
        given = demo_dataset(seed=seed) if data is None else data
        if task not in ("auto", given.task):
            what = "the demo reviews are" if data is None else "the data given is"
            raise UserError(f"the space says task: {task} but {what} {given.task} data; pass --data with {task} labels")
        return given
    loaded = load_text_classification(
        str(data), text_column=text_column, label_column=label_column, text_pair_column=text_pair_column,
        valid_path=None if valid_data is None else str(valid_data), valid_fraction=valid_fraction, seed=seed,
        empty_text=empty_text, task=task,
    )
    if loaded.dropped_empty:
        print(f"warning: dropped {loaded.dropped_empty} rows with empty text (pass --empty-text fail to refuse them)", file=sys.stderr)
    return loaded
