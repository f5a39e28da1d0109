"""What a data cell may hold: texts are strings; labels are all integers or all strings.

One label-typing rule for every format. A label is an integer when it is a JSON integer or a
string of decimal digits (``"1"``, ``" 01"``: surrounding whitespace is not part of a label),
and a string otherwise; so ``1`` and ``"1"`` are one class, whatever file they come from. A
float (``1.0``), a boolean, an object or a list is no label, and a file (train and validation
together) whose labels mix integers and strings is refused with one example of each: which
of them is a typo is the user's call, not ours.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trial_executor._files import DataError

Label = int | str

_INTEGER = re.compile(r"[+-]?[0-9]+")
INTEGER, STRING = "integer", "string"


def _shown(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)[:60]
    except (TypeError, ValueError):
        return repr(value)[:60]


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


def label_value(value: Any, where: str) -> Label:
    """The label in a cell as an integer or a string; ``where`` names the row in errors."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where} has no label; fill it in or remove the row")
    if isinstance(value, str):
        value = value.strip()
        return int(value) if _INTEGER.fullmatch(value) else value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise DataError(
        f"{where} has label {_shown(value)}, {_kind_name(value)}; labels must be integers or strings, "
        "so write it as one"
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
    return value


def label_kind(label: Label) -> str:
    return INTEGER if isinstance(label, int) else STRING


def check_one_kind(examples: dict[str, tuple[Label, str]]) -> None:
    """Refuse labels of both kinds; ``examples`` maps each kind seen to a label and where it is."""
    if INTEGER in examples and STRING in examples:
        (number, number_at), (name, name_at) = examples[INTEGER], examples[STRING]
        raise DataError(
            f"labels mix integers and strings: {number} ({number_at}) and {name!r} ({name_at}); "
            "make every label an integer or every label a name"
        )


def label_names(labels: set[Label]) -> list[str]:
    """Class names in id order: integers in numeric order, strings in alphabetical order."""
    return [str(label) for label in sorted(labels)]  # type: ignore[type-var]  # one kind, by check_one_kind
