"""Text-classification data: loading CSV, TSV and JSONL files into one in-memory form."""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path


class DataError(ValueError):
    """A data file cannot be used; the message names the problem and the fix."""


@dataclass(frozen=True)
class TextClassificationData:
    """Train and validation texts with integer labels; ``label_names[i]`` names label ``i``."""

    train_texts: list[str]
    train_labels: list[int]
    valid_texts: list[str]
    valid_labels: list[int]
    label_names: list[str]
    train_pairs: list[str] | None = None
    valid_pairs: list[str] | None = None
    dropped_empty: int = 0

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A content hash of both splits and the label names: equal data, equal fingerprint."""
        digest = hashlib.sha256()
        parts = (self.label_names, self.train_texts, self.train_labels, self.valid_texts, self.valid_labels)
        for part in (*parts, self.train_pairs, self.valid_pairs):
            digest.update(json.dumps(part, ensure_ascii=False).encode())
        return digest.hexdigest()[:16]


def _read_dataset_dir(path: Path, split: str | None) -> list[dict[str, object]]:
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{path} is a directory; reading a saved `datasets` dataset needs pip install 'precision-hpo[datasets]'"
        ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as err:
        raise DataError(f"{path} is not a dataset saved with save_to_disk ({err}); pass a file or such a directory") from None
    if isinstance(loaded, datasets.DatasetDict):
        wanted = split or "train"
        if wanted not in loaded:
            raise DataError(f"dataset {path} has no split {wanted!r} (found: {', '.join(loaded)}); pass a single split")
        loaded = loaded[wanted]
    rows = loaded.to_list()
    # ClassLabel columns store ids; their names are the labels users know.
    for column, feature in loaded.features.items():
        if isinstance(feature, datasets.ClassLabel):
            for row in rows:
                row[column] = feature.int2str(row[column])
    return rows


def _read_rows(path: Path, split: str | None = None) -> list[dict[str, object]]:
    if path.is_dir():
        return _read_dataset_dir(path, split)
    if not path.is_file():
        raise DataError(f"data file {path} not found; pass an existing CSV, TSV or JSONL file or a saved dataset directory")
    suffix = path.suffix.lower()
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise DataError(f"data file {path} is not UTF-8 (bad bytes on line {line}); re-save it as UTF-8") from None
    if suffix in (".jsonl", ".json"):
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"data file {path} line {number} is not valid JSON ({err.msg}); fix that line") from None
            if not isinstance(row, dict):
                raise DataError(f"data file {path} line {number} is not a JSON object; write one object per line")
            rows.append(row)
        return rows
    if suffix in (".csv", ".tsv"):
        if suffix == ".tsv":
            reader = csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            reader = csv.DictReader(text.splitlines())
        return list(reader)
    raise DataError(f"data file {path} has an unknown extension {suffix!r}; use .csv, .tsv or .jsonl")


@dataclass
class _Rows:
    texts: list[str]
    pairs: list[str] | None
    labels: list[str]
    dropped_empty: int

    def take(self, indices: list[int], dropped_empty: int) -> _Rows:
        pairs = None if self.pairs is None else [self.pairs[i] for i in indices]
        return _Rows([self.texts[i] for i in indices], pairs, [self.labels[i] for i in indices], dropped_empty)


def _columns(
    path: Path, rows: list[dict[str, object]], text_column: str, label_column: str, pair_column: str | None, empty_text: str
) -> _Rows:
    if not rows:
        raise DataError(f"data file {path} has no rows; give a file with a header and at least two classes")
    found = list(rows[0].keys())
    for column, flag in ((text_column, "--text-column"), (label_column, "--label-column"), (pair_column, "--text-pair-column")):
        if column is not None and column not in found:
            raise DataError(f"data file {path} has no column {column!r} (found: {', '.join(map(str, found))}); set {flag}")
    texts: list[str] = []
    pairs: list[str] | None = [] if pair_column else None
    labels: list[str] = []
    empty: list[int] = []
    for number, row in enumerate(rows, start=2):
        label = row.get(label_column)
        if label is None or str(label).strip() == "":
            raise DataError(f"data file {path} row {number} has no label; fill it in or remove the row")
        text = str(row.get(text_column) or "").strip()
        pair = str(row.get(pair_column) or "").strip() if pair_column else None
        if not text or (pair_column and not pair):
            empty.append(number)
            continue
        texts.append(text)
        labels.append(str(label).strip())
        if pairs is not None and pair is not None:
            pairs.append(pair)
    if empty and empty_text == "fail":
        raise DataError(
            f"data file {path} has {len(empty)} rows with empty text (first: row {empty[0]}); "
            "remove them or pass --empty-text drop"
        )
    return _Rows(texts, pairs, labels, len(empty))


def _label_names(labels: list[str]) -> list[str]:
    unique = set(labels)
    if all(label.lstrip("-").isdigit() for label in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def load_text_classification(
    path: str | Path,
    *,
    text_column: str = "text",
    label_column: str = "label",
    text_pair_column: str | None = None,
    valid_path: str | Path | None = None,
    valid_fraction: float = 0.1,
    seed: int = 0,
    empty_text: str = "drop",
) -> TextClassificationData:
    """Load labelled texts: a CSV, TSV or JSONL file, or a directory saved with ``datasets``.

    Validation comes from ``valid_path`` (or, for a saved ``DatasetDict``, its ``validation``
    split) or else a seeded hold-out of ``valid_fraction``. Labels may be integers or strings;
    ids follow numeric order for integer labels and alphabetical order otherwise. Rows with
    empty text are dropped and counted (``empty_text="drop"``) or refused (``"fail"``).
    Raises :class:`DataError` with a one-line explanation.
    """
    if empty_text not in ("drop", "fail"):
        raise DataError(f"--empty-text must be drop or fail, got {empty_text!r}")
    path = Path(path)
    train = _columns(path, _read_rows(path), text_column, label_column, text_pair_column, empty_text)
    if valid_path is None and path.is_dir() and _has_validation_split(path):
        valid_path, valid_split = path, "validation"
    else:
        valid_split = None
    if valid_path is not None:
        valid_path = Path(valid_path)
        valid = _columns(valid_path, _read_rows(valid_path, valid_split), text_column, label_column, text_pair_column, empty_text)
    else:
        if not 0 < valid_fraction < 1:
            raise DataError(f"--valid-fraction must be between 0 and 1, got {valid_fraction}")
        order = list(range(len(train.texts)))
        random.Random(seed).shuffle(order)
        n_valid = max(1, round(len(order) * valid_fraction))
        if len(order) - n_valid < 2:
            raise DataError(f"data file {path} has {len(order)} usable rows, too few to hold out validation; add rows")
        valid = train.take(order[:n_valid], 0)
        train = train.take(sorted(order[n_valid:]), train.dropped_empty)
    names = _label_names(train.labels)
    if len(names) < 2:
        single = repr(names[0]) if names else "none"
        raise DataError(f"data file {path} has a single class ({single}) in training; a classifier needs at least two")
    unseen = sorted(set(valid.labels) - set(names))
    if unseen:
        raise DataError(f"validation labels {unseen} never occur in training; add them to the training data")
    index = {name: i for i, name in enumerate(names)}
    return TextClassificationData(
        train_texts=train.texts,
        train_labels=[index[x] for x in train.labels],
        valid_texts=valid.texts,
        valid_labels=[index[x] for x in valid.labels],
        label_names=names,
        train_pairs=train.pairs,
        valid_pairs=valid.pairs,
        dropped_empty=train.dropped_empty + valid.dropped_empty,
    )


def _has_validation_split(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() and "validation" in json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
