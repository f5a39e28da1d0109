"""What a data cell may hold: texts are strings; labels are integers, numbers, names or label sets.

One label-typing rule for every format, and a label is taken exactly as written. A label is an
integer when it is a JSON integer or a string written as Python writes an integer (``"7"``,
``"-3"``); a number when it is a finite JSON float or a string written as one (``"0.25"``,
``"1e-3"``); a label set when it is a JSON list; and a name (string) otherwise. So ``1`` and
``"1"`` are one class, whatever file they come from, while ``"01"``, ``"+1"`` and ``"007"`` are
digit names (a code), never the integer they read as: beside integers they make every label a
name as written, beside numbers (regression) they are numbers. A label with whitespace around it,
a boolean or an object is no label, nor is NaN or infinity.

What the labels ask for is the task (:func:`resolve_task`): integers or names are classes,
numbers (integers among them) are a regression target, label sets a multi-label problem. A
file (train and validation together) whose labels mix kinds (integers and word names, say) is
refused with one example of each: which of them is a typo is the user's call, not ours. A label
set in a CSV or TSV cell is its labels separated by ``|`` (read so only when the task is ``multi_label``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from trial_executor._config import TASKS
from trial_executor.data._files import DataError

Label = int | float | str | tuple[int | str, ...]

_INTEGER = re.compile(r"0|-?[1-9][0-9]*")  # as Python writes one: str(int(x)) == x
_DIGITS = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
INTEGER, NUMBER, DIGITS, STRING, SET = "integer", "number", "digits", "string", "set"
_KIND_WORDS = {INTEGER: "integers", NUMBER: "numbers with decimals", DIGITS: "digit names", STRING: "strings", SET: "label sets"}
AUTO = "auto"  # the task read from the labels
CLASSIFICATION, REGRESSION, MULTI_LABEL = TASKS
SET_SEPARATOR = "|"


def _shown(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)[:60]
    except (TypeError, ValueError):
        return repr(value)[:60]


def example_of(label: Label, cell: Any) -> Label:
    """``label`` as its file writes it, for the errors that name it: a number read from text keeps its text (``1e3``)."""
    return cell if isinstance(label, float) and isinstance(cell, str) else label


def _shown_as(kind: str, example: Label) -> str:
    """An :func:`example_of` a label of ``kind``: a number kept as its text is shown as written (1e3, not 1000.0)."""
    return example if kind == NUMBER and isinstance(example, str) else _shown(example)


def _kind_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def label_value(value: Any, where: str, *, name: bool = False) -> Label:
    """The label in a cell: an integer, a finite number, a string, or (a JSON list) a label set.

    ``name``: the cell holds a class name as the data names it (a saved dataset's ``ClassLabel``), a string as it is.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where} has no label; fill it in or remove the row")
    if isinstance(value, list):
        return label_set(value, where, name=name)
    if isinstance(value, str) and name:
        _check_encodable(value, where)
        return value
    if isinstance(value, str):
        _check_as_written(value, where)
        if _INTEGER.fullmatch(value):
            try:
                return int(value)
            except ValueError:  # over sys.get_int_max_str_digits() (4,300) digits
                raise DataError(f"{where} has label {_shown(value)}, an integer of {len(value)} digits; fix the label") from None
        if _DIGITS.fullmatch(value):
            return value  # "01", "+1", "007": a code as written; a number only for regression (as_number)
        return _finite(float(value), value, where) if _NUMBER.fullmatch(value) else value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float):
        return _finite(value, value, where)
    raise DataError(
        f"{where} has label {_shown(value)}, {_kind_name(value)}; labels must be integers, numbers, strings "
        "or lists of labels, so write it as one"
    )


def _check_as_written(value: str, where: str) -> None:
    """A label is taken as written: one with whitespace around it would be another class than the same name without."""
    _check_encodable(value, where)
    if value != value.strip():
        raise DataError(
            f"{where} has label {_shown(value)} with whitespace around it; labels are taken as written, "
            "so remove the whitespace (a CSV with a space after each comma puts one in every label)"
        )


def as_number(label: Label, where: str) -> float:
    """A regression target: an integer, a number or a digit name (``"007"`` is 7.0) as a finite float."""
    try:
        number = float(label)  # type: ignore[arg-type]  # numbers or digit names, by resolve_task
    except OverflowError:  # an integer beyond a float's range
        number = math.inf
    return _finite(number, label, where)


def _finite(number: float, given: Any, where: str) -> float:
    if not math.isfinite(number):
        raise DataError(f"{where} has label {_shown(given)}, which is not a finite number; give a real number or remove the row")
    return number


def label_set(value: Any, where: str, *, name: bool = False) -> tuple[int | str, ...]:
    """A multi-label cell: a JSON list of labels, or a text of labels separated by ``|``."""
    if isinstance(value, str) and value.strip():
        items: list[Any] = value.split(SET_SEPARATOR)
    elif isinstance(value, list):
        items = value
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    else:
        return _not_a_set(value, where)
    labels: list[int | str] = []
    for item in items:
        if isinstance(item, str) and not item.strip():
            raise DataError(f"{where} has an empty label in {_shown(value)}; separate labels by one {SET_SEPARATOR!r}")
        label = label_value(item, where, name=name)
        if not isinstance(label, (int, str)):
            raise DataError(f"{where} has {_shown(item)} in label set {_shown(value)}; a set holds integers or names")
        if label in labels:
            raise DataError(f"{where} has label {_shown(label)} twice in {_shown(value)}; list each label once")
        labels.append(label)
    return tuple(labels)


def _not_a_set(value: Any, where: str) -> tuple[int | str, ...]:
    if value is None or isinstance(value, str):
        raise DataError(f"{where} has no label; fill it in or remove the row (a JSON [] is a row with no labels)")
    raise DataError(
        f"{where} has label {_shown(value)}, {_kind_name(value)}; a multi-label cell is a JSON list "
        f"or labels separated by {SET_SEPARATOR!r}"
    )


def text_value(row: dict[str, Any], column: str, where: str) -> str:
    """The text in ``row[column]`` exactly as given; a missing value (null) is an empty text."""
    if column not in row:
        raise DataError(f"{where} has no {column!r}; give every row a {column!r}")
    value = row[column]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(
            f"{where} has {_shown(value)} in column {column!r}, {_kind_name(value)}, not a text; write it as a string"
        )
    _check_encodable(value, f"{where} column {column!r}")
    return value


def _check_encodable(text: str, where: str) -> None:
    """A JSON escape can give a lone surrogate (``"\\ud800"``), which is no Unicode character: no tokenizer or store takes it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise DataError(
            f"{where} holds {text[err.start:err.end]!a}, half of a UTF-16 surrogate pair, no character; "
            "write the whole pair or the character itself"
        ) from None


def label_kind(label: Label) -> str:
    if isinstance(label, tuple):
        return SET
    if isinstance(label, float):
        return NUMBER
    if isinstance(label, int):
        return INTEGER
    return DIGITS if _DIGITS.fullmatch(label) else STRING


def _mix_error(examples: dict[str, tuple[Label, str]], first: str, second: str, fix: str) -> DataError:
    (a, a_at), (b, b_at) = examples[first], examples[second]
    return DataError(
        f"labels mix {_KIND_WORDS[first]} and {_KIND_WORDS[second]}: {_shown_as(first, a)} ({a_at}) and {_shown_as(second, b)} ({b_at}); {fix}"
    )


def check_one_kind(examples: dict[str, tuple[Label, str]]) -> None:
    """Refuse labels of two kinds; ``examples`` maps each kind seen to a label and where it is.

    Digit names go with integers (then all are names as written), with numbers (regression) or with names.
    """
    if INTEGER in examples and STRING in examples:
        (number, number_at), (name, name_at) = examples[INTEGER], examples[STRING]
        raise DataError(
            f"labels mix integers and strings: {number} ({number_at}) and {name!r} ({name_at}); "
            "make every label an integer or every label a name"
        )
    kinds = [kind for kind in _KIND_WORDS if kind in examples and kind != DIGITS]
    if len(kinds) > 1 and set(kinds) != {INTEGER, NUMBER}:
        raise _mix_error(examples, kinds[0], kinds[1], "give every row the same kind of label")
    if SET in examples and DIGITS in examples:
        raise _mix_error(examples, DIGITS, SET, "give every row the same kind of label")


def resolve_task(requested: str, examples: dict[str, tuple[Label, str]], labels: Iterable[Label]) -> str:
    """The task ``labels`` are for: ``requested``, or with ``auto`` what the labels say unambiguously.

    ``examples`` maps each label kind seen to one label (:func:`example_of`) and where it is (for the errors).
    """
    numbers = examples.get(NUMBER)
    if requested == CLASSIFICATION and (numbers or SET in examples):
        label, where = numbers or examples[SET]
        fix = "set task: regression for numeric targets" if numbers else "set task: multi_label for label sets"
        raise DataError(f"{where} has label {_shown_as(NUMBER if numbers else SET, label)}; task classification takes integers or names; {fix}")
    if requested == REGRESSION and (STRING in examples or SET in examples):
        label, where = examples.get(STRING) or examples[SET]
        raise DataError(f"{where} has label {_shown(label)}, not a number; task regression needs one number per row")
    check_one_kind(examples)
    if requested == AUTO:
        if SET in examples:
            return MULTI_LABEL
        if numbers is None:
            return CLASSIFICATION
        # 1.0 and 2.0 may be classes saved as floats or whole-valued targets: the user says which.
        if not any(isinstance(x, float) and not x.is_integer() for x in labels):
            raise DataError(
                f"labels are whole numbers written with decimals ({_shown_as(NUMBER, numbers[0])}, {numbers[1]}); "
                "set task: regression to predict them as numbers, or write them as integers for classes"
            )
        return REGRESSION
    return requested


def as_names(labels: list[Label]) -> list[Label]:
    """Class labels of one type: where any is a name (a digit name beside integers), each integer as its name ``str(n)``,
    which is how it was written (``"007"`` and ``7`` stay two classes, ``7`` and ``"7"`` one)."""
    flat = [x for label in labels for x in (label if isinstance(label, tuple) else (label,))]
    if not any(isinstance(x, str) for x in flat):
        return labels

    def name(x: int | str) -> str:
        return x if isinstance(x, str) else str(x)

    return [tuple(map(name, x)) if isinstance(x, tuple) else name(x) for x in labels]  # type: ignore[arg-type]


def label_names(labels: set[int | str]) -> list[str]:
    """Class names in id order: integers in numeric order, strings in alphabetical order."""
    return [str(label) for label in sorted(labels)]  # type: ignore[type-var]  # one type, by as_names
