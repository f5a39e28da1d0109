"""Reading a data file's records as they are: CSV, TSV, JSON Lines, a JSON array, a saved dataset.

Each file format is one reader registered for its suffixes with :func:`register_format`; the
messages that list what may be passed derive from that table. Files are parsed by the ``csv``
and ``json`` modules on the file stream itself (opened with ``newline=""`` and ``utf-8-sig``):
nothing splits the text into lines first, so a quoted CSV field keeps its line breaks, and form
feeds or U+2028 inside a text stay where they are. A UTF-8 byte-order mark is not part of the
first column's name.
"""

from __future__ import annotations

import contextlib
import csv
import json
import re
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from trial_executor.data._messages import bounded_list


class DataError(ValueError):
    """A data file cannot be used; the message names the problem and the fix."""


@dataclass(frozen=True)
class Records:
    """A file's rows as column -> value, and where each row starts (``unit`` ``numbers[i]``)."""

    rows: list[dict[str, Any]]
    numbers: list[int]
    unit: str  # "line" for text files, "item" for a JSON array, "row" for a saved dataset
    # Columns whose values are class names as the data names them (a saved dataset's ClassLabel):
    # "7" there is the name "7", never the integer 7.
    name_columns: frozenset[str] = frozenset()


Reader = Callable[[Path, IO[str]], Records]
"""``read(path, handle)``: the records of the file at ``path``, open as ``handle`` (text, ``utf-8-sig``, ``newline=""``)."""


@dataclass(frozen=True)
class DataFormat:
    """A registered file format: its name in messages (``"CSV"``), its suffixes and its reader."""

    name: str
    suffixes: tuple[str, ...]
    read: Reader


_FORMATS: dict[str, DataFormat] = {}  # by suffix (lower case, with the dot), in registration order


def register_format(name: str, *suffixes: str) -> Callable[[Reader], Reader]:
    """Decorate a :data:`Reader` to read files ending in ``suffixes`` (``".csv"``); ``name`` is how messages call it.

    Raises ``ValueError`` when a suffix has a reader already. :func:`unregister_format` takes it back.
    """

    def register(read: Reader) -> Reader:
        if not suffixes:
            raise ValueError(f"format {name!r} needs at least one suffix, such as '.csv'")
        for suffix in suffixes:
            if suffix.lower() in _FORMATS:
                raise ValueError(f"suffix {suffix} is read as {_FORMATS[suffix.lower()].name} already; give {name!r} suffixes of its own")
        for suffix in suffixes:
            _FORMATS[suffix.lower()] = DataFormat(name, tuple(s.lower() for s in suffixes), read)
        return read

    return register


def unregister_format(name: str) -> None:
    """Forget the format registered as ``name`` (nothing when there is none)."""
    for suffix in [suffix for suffix, found in _FORMATS.items() if found.name == name]:
        del _FORMATS[suffix]


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def file_kinds() -> str:
    """The registered formats as messages name them: ``CSV, TSV or JSONL``."""
    return _either(list(dict.fromkeys(found.name for found in _FORMATS.values())))


_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
)


def read_records(path: Path, split: str | None = None) -> Records:
    """The records of a file of a registered format (by its suffix), or of a directory saved with ``datasets``."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(f"data file {path} not found; pass an existing {file_kinds()} file or a saved dataset directory") from None
    except OSError as err:
        raise DataError(f"data file {path} cannot be read ({err.strerror}); check the path and its permissions") from None
    if stat.S_ISDIR(mode):
        return _read_dataset_dir(path, split)
    for is_kind, what in _NOT_REGULAR:
        if is_kind(mode):
            raise DataError(f"data file {path} is {what}, not a regular file; save the data to a {file_kinds()} file and pass that")
    suffix = path.suffix.lower()
    if suffix not in _FORMATS:
        raise DataError(f"data file {path} has an unknown extension {suffix!r}; use {_either(list(_FORMATS))}")
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            return _FORMATS[suffix].read(path, handle)
    except UnicodeDecodeError:
        raise DataError(_not_utf8(path)) from None
    except OSError as err:
        raise DataError(f"data file {path} cannot be read ({err.strerror}); check the path and its permissions") from None


# What a file that is no text at all starts with (re-saving it as UTF-8 is no fix for it).
_ARCHIVES = {b"\x1f\x8b": ("gzip-compressed", "gunzip"), b"PK\x03\x04": ("a zip archive", "unzip"),
             b"BZh": ("bzip2-compressed", "bunzip2"), b"\xfd7zXZ\x00": ("xz-compressed", "unxz")}


def _not_utf8(path: Path) -> str:
    with path.open("rb") as raw:
        start = raw.read(6)
    for magic, (what, tool) in _ARCHIVES.items():
        if start.startswith(magic):
            return f"data file {path} is {what}, not text; extract it ({tool}) and pass the {file_kinds()} file inside"
    return f"data file {path} is not UTF-8 (bad bytes on line {_bad_byte_line(path)}); re-save it as UTF-8"


def _bad_byte_line(path: Path) -> int:
    raw = path.read_bytes()
    try:
        raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        return raw[: err.start].count(b"\n") + 1
    return 0


@contextlib.contextmanager
def _whole_fields() -> Iterator[None]:
    """The csv module refuses a field over 131,072 characters by default (a long document is no bad CSV)."""
    before = csv.field_size_limit(sys.maxsize)
    try:
        yield
    finally:
        csv.field_size_limit(before)


@register_format("CSV", ".csv")
def _read_csv(path: Path, handle: IO[str]) -> Records:
    # strict: the lenient reader took '"hi" there' as 'hi there', a text changed without a word.
    return _read_delimited(path, csv.reader(handle, strict=True), "CSV",
                           "quote fields that hold a comma, a quote or a line break, the whole field, with each quote inside written twice")


@register_format("TSV", ".tsv")
def _read_tsv(path: Path, handle: IO[str]) -> Records:
    # TSV has no quoting: a tab or line break cannot be part of a field, a quote is plain text.
    reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
    return _read_delimited(path, reader, "TSV", "a text cannot hold a tab or a line break in TSV")


def _read_delimited(path: Path, reader: Any, kind: str, fix: str) -> Records:
    """The rows of a ``csv.reader`` whose first row is the header; ``kind`` and ``fix`` word its errors."""
    with _whole_fields():
        return _delimited_rows(path, reader, kind, fix)


_SEPARATORS = {"CSV": ",", "TSV": "\t"}


def _check_header(path: Path, header: list[str], kind: str) -> None:
    """A header that cannot be a data file's: blank (a blank first line), or one field holding another separator."""
    if not header:
        raise DataError(f"data file {path} starts with a blank line where its header should be; remove the blank line(s) above the header")
    if len(header) == 1:
        other = next((sep for sep in ("\t", ",", ";", "|") if sep in header[0] and sep != _SEPARATORS[kind]), None)
        if other is not None:
            raise DataError(
                f"data file {path} has a header of one {kind} field, {header[0]!r}, split by {other!r} instead; "
                f"save the file with {_SEPARATORS[kind]!r} between fields, or name it for its separator (.tsv for tabs, .csv for commas)"
            )


def _delimited_rows(path: Path, reader: Any, kind: str, fix: str) -> Records:
    rows: list[dict[str, Any]] = []
    numbers: list[int] = []
    try:
        header = next(reader, None)
        if header is None:
            return Records([], [], "line")
        _check_header(path, header, kind)
        twice = sorted({name for name in header if header.count(name) > 1})
        if twice:
            raise DataError(f"data file {path} has more than one column named {twice[0]!r}; give each column its own name")
        start = reader.line_num + 1
        for fields in reader:
            if len(fields) == 1 and len(header) > 1 and not fields[0].strip():
                raise DataError(f"data file {path} line {start} holds only whitespace, no {kind} fields; remove it (an empty line is skipped)")
            if fields and len(fields) != len(header):
                raise DataError(
                    f"data file {path} line {start} has {len(fields)} {kind} field{'s' * (len(fields) != 1)} but the header "
                    f"has {len(header)}; {fix}"
                )
            if fields:  # a blank line is no record
                rows.append(dict(zip(header, fields, strict=True)))
                numbers.append(start)
            start = reader.line_num + 1
    except csv.Error as err:
        raise DataError(f"data file {path} line {reader.line_num} is not valid {kind} ({err}); {fix}") from None
    return Records(rows, numbers, "line")


class _KeyTwice(ValueError):
    pass


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of a key given twice, silently: which one the user meant is theirs to say.
    row = dict(pairs)
    if len(row) != len(pairs):
        twice = next(key for i, (key, _) in enumerate(pairs) if key in dict(pairs[:i]))
        raise _KeyTwice(f"the key {twice!r} twice in one object")
    return row


def _json_problem(err: Exception) -> str:
    """What a JSON parse error says, for a message: a value json cannot take as it is (an integer of
    over 4,300 digits, nesting deeper than the interpreter's stack) is no decode error."""
    if isinstance(err, json.JSONDecodeError):
        return err.msg
    if isinstance(err, RecursionError):
        return "nested too deeply"
    return str(err) if isinstance(err, _KeyTwice) else str(err).split(":")[0]


def _parse_json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_one_value_per_key)


@register_format("JSONL", ".jsonl", ".json")
def _read_json(path: Path, handle: IO[str]) -> Records:
    """JSON Lines (one object per line), or a file holding one JSON array of objects."""
    items = _json_array(path, handle)
    if items is not None:
        for number, item in enumerate(items, start=1):
            if not isinstance(item, dict):
                raise DataError(f"data file {path} item {number} of its JSON array is not an object; make every item an object")
        return Records(items, list(range(1, len(items) + 1)), "item")
    rows: list[dict[str, Any]] = []
    numbers: list[int] = []
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            row = _parse_json(line)
        except json.JSONDecodeError as err:
            raise DataError(_bad_json_line(path, handle, number, err)) from None
        except (ValueError, RecursionError) as err:
            raise DataError(f"data file {path} line {number} cannot be read as JSON ({_json_problem(err)}); fix that line") from None
        if not isinstance(row, dict):
            raise DataError(f"data file {path} line {number} is not a JSON object; write one object per line")
        rows.append(row)
        numbers.append(number)
    return Records(rows, numbers, "line")


def _json_array(path: Path, handle: IO[str]) -> list[Any] | None:
    """The file's one JSON array, ``None`` where it holds none (JSON Lines); ``handle`` is left at its start."""
    head = handle.read(4096).lstrip()
    handle.seek(0)
    if not head.startswith("["):
        return None
    try:
        return _parse_json(handle.read())
    except json.JSONDecodeError as err:
        if err.msg == "Extra data" and _first_line_parses(handle):  # JSON Lines whose first line is an array: said so
            return None
        raise DataError(f"data file {path} is not valid JSON ({err.msg} on line {err.lineno}); fix it") from None
    except (ValueError, RecursionError) as err:
        raise DataError(f"data file {path} cannot be read as JSON ({_json_problem(err)}); fix it") from None
    finally:
        handle.seek(0)


def _first_line_parses(handle: IO[str]) -> bool:
    handle.seek(0)
    try:
        _parse_json(handle.readline())
    except (ValueError, RecursionError):
        return False
    return True


def _bad_json_line(path: Path, handle: IO[str], number: int, err: json.JSONDecodeError) -> str:
    if number == 1:
        # A pretty-printed JSON document is not JSON Lines: say what the file holds.
        handle.seek(0)
        count = _objects_in(handle.read())
        if count == 1:
            return (f"data file {path} holds one JSON object, not one record per line; "
                    "write JSON Lines (one object per line) or a JSON array of objects")
        if count > 1:  # jq's output without -c: each object over several lines
            return (f"data file {path} holds {count} JSON objects written over several lines each, not one per line; "
                    "write each object on one line (JSON Lines; jq -c does) or a JSON array of objects")
    return f"data file {path} line {number} is not valid JSON ({err.msg}); fix that line"


_SPACE = re.compile(r"\s*")


def _objects_in(text: str) -> int:
    """How many JSON objects ``text`` is, one after another; 0 where it is anything else."""
    decoder, count, at = json.JSONDecoder(), 0, _SPACE.match(text).end()  # type: ignore[union-attr]  # \s* always matches
    while at < len(text):
        try:
            value, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            return 0
        if not isinstance(value, dict):
            return 0
        count, at = count + 1, _SPACE.match(text, at).end()  # type: ignore[union-attr]
    return count


def _read_dataset_dir(path: Path, split: str | None) -> Records:
    if not any((path / name).is_file() for name in ("dataset_dict.json", "state.json")):
        raise DataError(
            f"data file {path} is a directory but not a dataset saved with save_to_disk; pass a {file_kinds()} file or such a directory"
        )
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
            raise DataError(f"dataset {path} has no split {wanted!r} (found: {bounded_list(loaded)}); pass a single split")
        loaded = loaded[wanted]
    rows = loaded.to_list()
    # ClassLabel columns store ids; their names are the labels users know (of each row, or of each member of a row's set).
    names = set()
    for column, feature in loaded.features.items():
        inner = getattr(feature, "feature", None)  # List / Sequence of ClassLabel: a multi-label column
        if isinstance(feature, datasets.ClassLabel):
            names.add(column)
            for number, row in enumerate(rows, start=1):
                row[column] = _class_name(path, feature, row[column], column, number)
        elif isinstance(inner, datasets.ClassLabel):
            names.add(column)
            for number, row in enumerate(rows, start=1):
                row[column] = [_class_name(path, inner, i, column, number) for i in row[column] or ()]
    return Records(rows, list(range(1, len(rows) + 1)), "row", frozenset(names))


def _class_name(path: Path, feature: Any, class_id: int, column: str, number: int) -> str:
    if not 0 <= class_id < feature.num_classes:  # -1: no label (a test split)
        raise DataError(
            f"dataset {path} row {number} has class id {class_id} in column {column!r}, which names no class "
            f"(-1 is a row without a label, as in a test split); pass a labelled split or drop those rows"
        )
    return str(feature.int2str(class_id))


def has_validation_split(path: Path) -> bool:
    """Whether ``path`` is a saved ``DatasetDict`` with a ``validation`` split."""
    index = path / "dataset_dict.json"
    return index.is_file() and "validation" in json.loads(index.read_text(encoding="utf-8")).get("splits", [])
