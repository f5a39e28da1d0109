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

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A content hash of both splits and the label names: equal data, equal fingerprint."""
        digest = hashlib.sha256()
        for part in (self.label_names, self.train_texts, self.train_labels, self.valid_texts, self.valid_labels):
            digest.update(json.dumps(part, ensure_ascii=False).encode())
        return digest.hexdigest()[:16]


def _read_rows(path: Path) -> list[dict[str, object]]:
    if not path.is_file():
        raise DataError(f"data file {path} not found; pass an existing CSV, TSV or JSONL file")
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


def _columns(path: Path, rows: list[dict[str, object]], text_column: str, label_column: str) -> tuple[list[str], list[str]]:
    if not rows:
        raise DataError(f"data file {path} has no rows; give a file with a header and at least two classes")
    found = list(rows[0].keys())
    for column, flag in ((text_column, "--text-column"), (label_column, "--label-column")):
        if column not in found:
            raise DataError(f"data file {path} has no column {column!r} (found: {', '.join(map(str, found))}); set {flag}")
    texts, labels = [], []
    for number, row in enumerate(rows, start=2):
        text, label = row.get(text_column), row.get(label_column)
        if text is None or label is None or str(label).strip() == "":
            raise DataError(f"data file {path} row {number} has a missing text or label; fill it in or remove the row")
        texts.append(str(text).strip())
        labels.append(str(label).strip())
    return texts, labels


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
    valid_path: str | Path | None = None,
    valid_fraction: float = 0.1,
    seed: int = 0,
) -> TextClassificationData:
    """Load a labelled text file, with an explicit validation file or a seeded hold-out.

    Labels may be integers or strings; ids follow numeric order for integer labels and
    alphabetical order otherwise. Raises :class:`DataError` with a one-line explanation.
    """
    path = Path(path)
    texts, labels = _columns(path, _read_rows(path), text_column, label_column)
    if valid_path is not None:
        valid_path = Path(valid_path)
        valid_texts, valid_labels = _columns(valid_path, _read_rows(valid_path), text_column, label_column)
    else:
        if not 0 < valid_fraction < 1:
            raise DataError(f"--valid-fraction must be between 0 and 1, got {valid_fraction}")
        order = list(range(len(texts)))
        random.Random(seed).shuffle(order)
        n_valid = max(1, round(len(texts) * valid_fraction))
        if len(texts) - n_valid < 2:
            raise DataError(f"data file {path} has {len(texts)} rows, too few to hold out validation; add rows")
        held = set(order[:n_valid])
        valid_texts = [texts[i] for i in order[:n_valid]]
        valid_labels = [labels[i] for i in order[:n_valid]]
        texts = [t for i, t in enumerate(texts) if i not in held]
        labels = [x for i, x in enumerate(labels) if i not in held]
    names = _label_names(labels)
    if len(names) < 2:
        raise DataError(f"data file {path} has a single class ({names[0]!r}) in training; a classifier needs at least two")
    unseen = sorted(set(valid_labels) - set(names))
    if unseen:
        raise DataError(f"validation labels {unseen} never occur in training; add them to the training data")
    index = {name: i for i, name in enumerate(names)}
    return TextClassificationData(
        train_texts=texts,
        train_labels=[index[x] for x in labels],
        valid_texts=valid_texts,
        valid_labels=[index[x] for x in valid_labels],
        label_names=names,
    )
