"""Text-classification data: loading CSV, TSV and JSON(L) files into one in-memory form.

How files are read is :mod:`trial_executor.data._files`; what a text or a label may be, and which
task the labels are for, is :mod:`trial_executor.data._values`. Texts reach the tokenizer exactly as
they are in the file; labels become the targets the model trains on, their names kept as given.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from trial_executor._config import TASKS
from trial_executor.data._files import DataError, Records, file_kinds, has_validation_split, read_records
from trial_executor.data._messages import bounded_list
from trial_executor.data._stratified import stratified_rows
from trial_executor.data._values import (
    AUTO,
    CLASSIFICATION,
    MULTI_LABEL,
    REGRESSION,
    Label,
    as_names,
    as_number,
    check_one_kind,
    example_of,
    label_kind,
    label_names,
    label_set,
    label_value,
    resolve_task,
    text_value,
)

__all__ = ["HOLDOUTS", "DataError", "TextClassificationData", "hold_out_size", "load_text_classification"]

# How a file without a validation split is held out (load_text_classification's ``holdout``): the first is the default.
STRATIFIED, RANDOM = "stratified", "random"
HOLDOUTS = (STRATIFIED, RANDOM)


@dataclass(frozen=True)
class TextClassificationData:
    """Train and validation texts with their targets; ``label_names[i]`` names the model's output ``i``.

    The targets by ``task``: ``classification``, a class id per row; ``regression``, a float per
    row (one output, named after the label column); ``multi_label``, a row of 0.0/1.0 per label
    (multi-hot).
    """

    train_texts: list[str]
    train_labels: list[int] | list[float] | list[list[float]]
    valid_texts: list[str]
    valid_labels: list[int] | list[float] | list[list[float]]
    label_names: list[str]
    train_pairs: list[str] | None = None
    valid_pairs: list[str] | None = None
    dropped_empty: int = 0
    task: str = CLASSIFICATION

    def __post_init__(self) -> None:
        _check_in_memory(self)

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @functools.cached_property
    def valid_rows_seen_in_training(self) -> int:
        """Validation rows whose text (and pair) is also a training row's: scores on them measure recall of a trained
        row as much as how the model does on unseen text. Counted, never removed: the data stays as given."""
        seen = set(zip(self.train_texts, self.train_pairs or [None] * len(self.train_texts), strict=True))
        return sum(row in seen for row in zip(self.valid_texts, self.valid_pairs or [None] * len(self.valid_texts), strict=True))

    @functools.cached_property
    def fingerprint(self) -> str:
        """A content hash of both splits and the label names: equal data, equal fingerprint."""
        digest = hashlib.sha256()
        parts = (self.label_names, self.train_texts, self.train_labels, self.valid_texts, self.valid_labels)
        for part in (*parts, self.train_pairs, self.valid_pairs):
            digest.update(json.dumps(part, ensure_ascii=False).encode())
        return digest.hexdigest()[:16]


def _type_name(value: object) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def _target_problem(task: str, value: object, num_labels: int) -> str | None:
    """Why ``value`` is not a target of ``task`` (the form :class:`TextClassificationData` documents), or None."""
    if task == CLASSIFICATION:
        if type(value) is not int or not 0 <= value < num_labels:  # not bool, not numpy's ints (no JSON for the fingerprint)
            return f"classification targets are class ids, Python ints 0..{num_labels - 1} (one per label name)"
    elif task == REGRESSION:
        if not isinstance(value, float) or not math.isfinite(value):
            return "regression targets are finite Python floats (write a whole number as 3.0)"
    elif not isinstance(value, (list, tuple)) or len(value) != num_labels or any(v not in (0, 1) or isinstance(v, bool) for v in value):
        return f"multi_label targets are rows of {num_labels} values, 1.0 for each of the row's labels and 0.0 for the others"
    return None


def _check_in_memory(data: TextClassificationData) -> None:
    """The documented form, for data built in Python (files are checked as they are read): the first problem, one line."""
    if data.task not in TASKS:
        raise DataError(f"task must be one of {', '.join(TASKS)}, got {data.task!r}")
    for column in ("label_names", "train_texts", "train_labels", "valid_texts", "valid_labels", "train_pairs", "valid_pairs"):
        value = getattr(data, column)
        optional = column.endswith("_pairs") and value is None
        if not optional and not isinstance(value, (list, tuple)):
            raise DataError(f"{column} is a {_type_name(value)}; give a list (list(...) of it)")
    if not data.label_names or not all(isinstance(name, str) for name in data.label_names):
        raise DataError(f"label_names must name each output with a str, got {data.label_names!r}"[:200])
    twice = next((name for i, name in enumerate(data.label_names) if name in data.label_names[:i]), None)
    if twice is not None:
        raise DataError(f"label_names has {twice!r} twice; name each output once")
    if data.task == REGRESSION and data.num_labels != 1:
        raise DataError(f"regression has one output: label_names names it alone, got {data.num_labels} names")
    if data.task != REGRESSION and data.num_labels < 2:
        raise DataError(f"{data.task} needs at least two label_names, got {data.label_names!r}")
    if (data.train_pairs is None) != (data.valid_pairs is None):
        given, missing = ("train_pairs", "valid_pairs") if data.valid_pairs is None else ("valid_pairs", "train_pairs")
        raise DataError(f"{given} is given but {missing} is not: a model trained on pairs is validated on pairs; give both, or neither")
    for split in ("train", "valid"):
        _check_split(data, split)
    if data.task == CLASSIFICATION and len(set(data.train_labels)) < 2:  # type: ignore[arg-type]  # ints, checked above
        raise DataError(f"train_labels holds a single class ({data.label_names[data.train_labels[0]]!r}); a classifier needs at least two")


def _check_split(data: TextClassificationData, split: str) -> None:
    texts, labels, pairs = getattr(data, f"{split}_texts"), getattr(data, f"{split}_labels"), getattr(data, f"{split}_pairs")
    if len(texts) != len(labels) or (pairs is not None and len(pairs) != len(texts)):
        shown = "" if pairs is None else f", {split}_pairs {len(pairs)}"
        raise DataError(f"{split}_texts has {len(texts)} rows, {split}_labels {len(labels)}{shown}; give one of each per row")
    if not texts:
        raise DataError(f"{split}_texts is empty; give at least one row")
    for column, values in ((f"{split}_texts", texts), (f"{split}_pairs", pairs or ())):
        odd = next((i for i, text in enumerate(values) if not isinstance(text, str)), None)
        if odd is not None:
            raise DataError(f"{column}[{odd}] is a {_type_name(values[odd])}; texts are str")
    empty = next((i for i, text in enumerate(texts) if not text.strip()), None)
    if empty is not None:  # a file's empty texts are dropped and counted as it is read; data given in Python is taken as given
        raise DataError(f"{split}_texts[{empty}] is empty; leave that row out, or give it its text")
    for i, value in enumerate(labels):
        problem = _target_problem(data.task, value, data.num_labels)
        if problem is not None:
            raise DataError(f"{split}_labels[{i}] is {str(value)[:60]} ({_type_name(value)}); {problem}")


@dataclass
class _Rows:
    texts: list[str]
    pairs: list[str] | None
    labels: list[Label]
    dropped_empty: int
    examples: dict[str, tuple[Label, str]] = field(default_factory=dict)  # label kind -> a label and where it is
    places: list[str] = field(default_factory=list)  # where each row is, for errors

    def take(self, indices: list[int], dropped_empty: int) -> _Rows:
        pairs = None if self.pairs is None else [self.pairs[i] for i in indices]
        labels = [self.labels[i] for i in indices]
        places = [self.places[i] for i in indices]
        return _Rows([self.texts[i] for i in indices], pairs, labels, dropped_empty, self.examples, places)


def _columns(
    path: Path, records: Records, text_column: str, label_column: str, pair_column: str | None, empty_text: str,
    multi_label: bool,
) -> _Rows:
    if not records.rows:
        raise DataError(f"data file {path} has no rows; give a file with a header and at least two classes")
    found = list(records.rows[0].keys())
    named = ((text_column, "--text-column"), (label_column, "--label-column"), (pair_column, "--text-pair-column"))
    if any(column is not None and column not in found for column, _ in named):
        # JSON rows each have their own keys: a column the first row lacks is that row's problem if another row has it.
        found = list(dict.fromkeys(key for row in records.rows for key in row))
    for column, flag in named:
        if column is not None and column not in found:
            raise DataError(f"data file {path} has no column {column!r} (found: {bounded_list(map(repr, found))}); set {flag}")
    rows = _Rows([], [] if pair_column else None, [], 0)
    empty: list[int] = []
    for number, row in zip(records.numbers, records.rows, strict=True):
        where = f"data file {path} {records.unit} {number}"
        # Texts go on exactly as given; only the test for an empty text ignores whitespace.
        text = text_value(row, text_column, where)
        pair = text_value(row, pair_column, where) if pair_column else None
        if row.get(text_column) == text_column and row.get(label_column) == label_column:
            raise DataError(f"{where} repeats the header ({text_column!r}, {label_column!r}); remove it (two files joined?)")
        if not text.strip() or (pair is not None and not pair.strip()):
            empty.append(number)  # its label unread: a spreadsheet's trailing row of empty cells is an empty text too
            continue
        read = label_set if multi_label else label_value
        cell = row.get(label_column)
        label = read(cell, where, name=label_column in records.name_columns)
        rows.texts.append(text)
        rows.labels.append(label)
        rows.places.append(where)
        rows.examples.setdefault(label_kind(label), (example_of(label, cell), where))
        if rows.pairs is not None and pair is not None:
            rows.pairs.append(pair)
    if empty and empty_text == "fail":
        raise DataError(
            f"data file {path} has {len(empty)} rows with empty text (first: {records.unit} {empty[0]}); "
            "remove them or pass --empty-text drop"
        )
    rows.dropped_empty = len(empty)
    if not rows.texts:
        raise DataError(
            f"data file {path} has no row with a text" + (f" ({len(empty)} with empty text dropped)" if empty else "")
            + f"; give it rows with text in column {text_column!r}"
        )
    return rows


def _check_arguments(
    text_column: str, label_column: str, text_pair_column: str | None, empty_text: str, task: str, holdout: str,
) -> None:
    """The arguments' own mistakes, before any file is read; one column read as two things (a text that is its own label) too."""
    if empty_text not in ("drop", "fail"):
        raise DataError(f"--empty-text must be drop or fail, got {empty_text!r}")
    if task not in (AUTO, CLASSIFICATION, REGRESSION, MULTI_LABEL):
        raise DataError(f"task must be auto, {CLASSIFICATION}, {REGRESSION} or {MULTI_LABEL}, got {task!r}")
    if holdout not in HOLDOUTS:
        raise DataError(f"--holdout must be {' or '.join(HOLDOUTS)}, got {holdout!r}")
    named = [("--text-column", text_column), ("--label-column", label_column), ("--text-pair-column", text_pair_column)]
    for i, (flag, column) in enumerate(named):
        other = next((earlier for earlier, name in named[:i] if column is not None and name == column), None)
        if other is not None:
            raise DataError(f"{other} and {flag} both name the column {column!r}; give each its own column")


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
    task: str = AUTO,
    holdout: str = STRATIFIED,
) -> TextClassificationData:
    """Load labelled texts: a CSV, TSV or JSONL file, or a directory saved with ``datasets``.

    Validation comes from ``valid_path`` (or, for a saved ``DatasetDict``, its ``validation``
    split) or else a hold-out of ``valid_fraction`` drawn with ``seed``: ``holdout="stratified"``
    (classification: each class held out in its share of the file, at least one of its rows kept
    for training), or ``"random"`` (any rows; regression and multi-label always). ``task`` is ``classification``,
    ``regression``, ``multi_label``, or ``auto``: what the labels say (see
    :mod:`trial_executor.data._values`). Class ids follow numeric order for integer labels and
    alphabetical order otherwise. A JSON file may be JSON Lines or one array of objects. Rows with
    empty text are dropped and counted (``empty_text="drop"``) or refused (``"fail"``).
    Raises :class:`DataError` with a one-line explanation.
    """
    _check_arguments(text_column, label_column, text_pair_column, empty_text, task, holdout)
    path = Path(path)
    columns = (text_column, label_column, text_pair_column, empty_text, task == MULTI_LABEL)
    train = _columns(path, read_records(path), *columns)
    if valid_path is None and path.is_dir() and has_validation_split(path):
        valid_path, valid_split = path, "validation"
    else:
        valid_split = None
    valid = None
    if valid_path is not None:
        valid_path = _validation_file(path, Path(valid_path), valid_split)
        # A saved DatasetDict given for validation validates on its validation split (never its train split).
        valid = _columns(valid_path, read_records(valid_path, valid_split or "validation"), *columns)
    task = _settle_labels(task, [train] if valid is None else [train, valid])
    if valid is not None:
        unseen_fix = "add them to the training data"
    else:
        train, valid = _hold_out(path, train, valid_fraction, random.Random(seed), holdout == STRATIFIED and task == CLASSIFICATION)
        unseen_fix = (f"the --valid-fraction {valid_fraction} hold-out took every row of them from {path}; "
                      "add rows of them, or pass a validation file (--valid-data)")
    targets = {CLASSIFICATION: _label_ids, REGRESSION: _numbers, MULTI_LABEL: _multi_hot}[task]
    names, train_targets, valid_targets = targets(path, train, valid, label_column, unseen_fix)
    return TextClassificationData(
        train_texts=train.texts,
        train_labels=train_targets,
        valid_texts=valid.texts,
        valid_labels=valid_targets,
        label_names=names,
        train_pairs=train.pairs,
        valid_pairs=valid.pairs,
        dropped_empty=train.dropped_empty + valid.dropped_empty,
        task=task,
    )


def _settle_labels(task: str, splits: list[_Rows]) -> str:
    """The task the labels of every split ask for, and (a classification) their labels made one type in place:
    integers as their names where any label is a name (:func:`as_names`)."""
    examples = {kind: example for rows in reversed(splits) for kind, example in rows.examples.items()}
    task = resolve_task(task, examples, [label for rows in splits for label in rows.labels])
    if task == REGRESSION:
        return task
    if task == MULTI_LABEL:  # the kinds of the sets' members
        members = {
            label_kind(label): (label, where)
            for rows in reversed(splits) for labels, where in zip(rows.labels, rows.places, strict=True)
            for label in labels  # type: ignore[union-attr]  # label sets, by resolve_task
        }
        check_one_kind(members)
    labels = as_names([label for rows in splits for label in rows.labels])
    for rows in splits:
        rows.labels, labels = labels[: len(rows.labels)], labels[len(rows.labels):]
    return task


def _validation_file(path: Path, valid_path: Path, split: str | None) -> Path:
    """``valid_path``, refused where it is missing or is the training file itself (scores on rows it trained on)."""
    if not valid_path.exists():
        raise DataError(f"validation file {valid_path} (--valid-data) not found; pass an existing {file_kinds()} file, "
                        "or drop --valid-data to hold out --valid-fraction of --data")
    if split is None and valid_path.samefile(path):
        raise DataError(f"--valid-data {valid_path} is the training file (--data) itself: every score would be on rows the "
                        "trial trained on; pass a separate validation file, or drop --valid-data to hold out --valid-fraction")
    return valid_path


def hold_out_size(rows: int, fraction: float) -> int:
    """How many of ``rows`` a ``fraction`` hold-out asks for (a stratified one may hold out fewer: each class keeps a row)."""
    return max(1, round(rows * fraction))


def _hold_out(path: Path, rows: _Rows, fraction: float, rng: random.Random, stratify: bool) -> tuple[_Rows, _Rows]:
    """``rows`` split into training and a hold-out of ``fraction`` of them, by class where ``stratify``. Training keeps
    file order, as does the stratified hold-out; the random one keeps its drawn order, as it always has (a study made
    with it must see the very same data again)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:  # '0.2': no TypeError
        raise DataError(f"--valid-fraction must be a number between 0 and 1, got {fraction!r}")
    n_valid = hold_out_size(len(rows.texts), fraction)
    if len(rows.texts) - n_valid < 2:  # the fraction is the fix where the rows would leave two to train on at a lower one
        lower = "lower --valid-fraction, " if len(rows.texts) - hold_out_size(len(rows.texts), 0) >= 2 else ""
        raise DataError(f"data file {path} has {len(rows.texts)} usable rows: a --valid-fraction {fraction} hold-out takes "
                        f"{n_valid}, leaving {len(rows.texts) - n_valid} to train on (at least 2 are needed); "
                        f"{lower}add rows, or pass a validation file (--valid-data)")
    if stratify:
        held = stratified_rows(rows.labels, n_valid, rng)
        if not held:
            raise DataError(f"data file {path} has no class with two rows, so none can be held out for validation; "
                            "add rows, or pass a validation file (--valid-data)")
    else:
        order = list(range(len(rows.texts)))
        rng.shuffle(order)
        held = order[:n_valid]
    taken = set(held)
    kept = [i for i in range(len(rows.texts)) if i not in taken]
    return rows.take(kept, rows.dropped_empty), rows.take(held, 0)


def _refuse_unseen(valid_labels: set[int | str], classes: set[int | str], fix: str) -> None:
    unseen = label_names(valid_labels - classes)
    if unseen:
        raise DataError(f"validation labels [{bounded_list(map(repr, unseen))}] never occur in training; {fix}")


def _label_ids(path: Path, train: _Rows, valid: _Rows, column: str, unseen_fix: str) -> tuple[list[str], list[int], list[int]]:
    """The class names, and each split's labels as ids: one label kind across both splits."""
    classes = set(train.labels)
    _refuse_unseen(set(valid.labels), classes, unseen_fix)  # type: ignore[arg-type]  # single labels
    names = label_names(classes)
    if len(names) < 2:
        single = repr(names[0]) if names else "none"
        raise DataError(f"data file {path} has a single class ({single}) in training; a classifier needs at least two")
    index = {label: i for i, label in enumerate(sorted(classes))}  # type: ignore[type-var]  # one kind
    return names, [index[x] for x in train.labels], [index[x] for x in valid.labels]


def _numbers(path: Path, train: _Rows, valid: _Rows, column: str, unseen_fix: str) -> tuple[list[str], list[float], list[float]]:
    """Regression: one output named after the label column, each row's number as a float."""
    values = [as_number(x, where) for x, where in zip(train.labels, train.places, strict=True)]
    if len(set(values)) < 2:
        raise DataError(f"data file {path} has a single target value ({values[0]:g}) in training; regression needs targets that vary")
    return [column], values, [as_number(x, where) for x, where in zip(valid.labels, valid.places, strict=True)]


def _multi_hot(path: Path, train: _Rows, valid: _Rows, column: str, unseen_fix: str) -> tuple[list[str], list[list[float]], list[list[float]]]:
    """Multi-label: the label names, and each row as 1.0 for its labels and 0.0 for the others."""
    classes: set[int | str] = {label for labels in train.labels for label in labels}  # type: ignore[union-attr]
    _refuse_unseen({label for labels in valid.labels for label in labels}, classes, unseen_fix)  # type: ignore[union-attr]
    names = label_names(classes)
    if len(names) < 2:
        raise DataError(f"data file {path} has {len(names)} distinct label(s) in training; multi-label data needs at least two")
    index = {label: i for i, label in enumerate(sorted(classes))}  # type: ignore[type-var]  # one kind

    def hot(labels: tuple[int | str, ...]) -> list[float]:
        row = [0.0] * len(names)
        for label in labels:
            row[index[label]] = 1.0
        return row

    return names, [hot(x) for x in train.labels], [hot(x) for x in valid.labels]  # type: ignore[arg-type]
