"""Nothing silently changed in the user's data: texts byte-for-byte, one label-typing rule, clear refusals."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

from trial_executor import DataError, load_text_classification

# Characters that str.splitlines() treats as line breaks, but a CSV/TSV/JSON parser does not.
ODD_BREAKS = "\f\v\x1c\x1d\x1e\x85\u2028\u2029"


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def _texts(data: object) -> set[str]:
    return {*data.train_texts, *data.valid_texts}  # type: ignore[attr-defined]


def test_csv_quoted_line_breaks_and_odd_separators_reach_the_tokenizer_unchanged(tmp_path: Path) -> None:
    texts = ["boring\nplot", "crlf\r\ninside", f"odd{ODD_BREAKS}breaks", "  padded  ", 'say "hi", twice']
    body = "".join('"{}",{}\r\n'.format(t.replace('"', '""'), i % 2) for i, t in enumerate(texts))
    path = tmp_path / "d.csv"
    path.write_bytes(("text,label\r\n" + body).encode("utf-8"))
    data = load_text_classification(path, valid_fraction=0.2)
    assert _texts(data) == set(texts)
    assert len(data.train_texts) + len(data.valid_texts) == len(texts)


def test_tsv_and_jsonl_keep_form_feeds_and_unicode_line_separators(tmp_path: Path) -> None:
    texts = [f"a{c}b" for c in ODD_BREAKS] + ['tsv keeps "quotes" as text ']
    tsv = tmp_path / "d.tsv"
    tsv.write_text("sentence\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(texts)), encoding="utf-8")
    assert _texts(load_text_classification(tsv, text_column="sentence", valid_fraction=0.2)) == set(texts)
    jsonl = tmp_path / "d.jsonl"
    # Raw (unescaped) U+2028 and form feeds inside JSON strings, as ensure_ascii=False writes them.
    jsonl.write_text("".join(json.dumps({"text": t, "label": i % 2}, ensure_ascii=False) + "\n" for i, t in enumerate(texts)))
    assert _texts(load_text_classification(jsonl, valid_fraction=0.2)) == set(texts)


def test_one_class_per_label_value_whatever_file_it_comes_from(tmp_path: Path) -> None:
    rows = [{"text": f"t{i}", "label": label} for i, label in enumerate([1, "1", 0, "0", 2, "2", 1])]
    data = load_text_classification(_jsonl(tmp_path / "d.jsonl", rows), valid_fraction=0.3)
    assert data.label_names == ["0", "1", "2"]
    csv_valid = tmp_path / "valid.csv"
    csv_valid.write_text("text,label\nx,1\ny,2\n")
    data = load_text_classification(tmp_path / "d.jsonl", valid_path=csv_valid)
    assert data.label_names == ["0", "1", "2"] and data.valid_labels == [1, 2]


@pytest.mark.parametrize(
    ("labels", "names"),
    [
        (["01", "1", "02", "2"], ["01", "02", "1", "2"]),  # "01" merged into class 1: four classes, as written
        (["007", "A12"], ["007", "A12"]),  # codes: "007" was read as 7, then refused beside a name
        (["007", "010", "100"], ["007", "010", "100"]),  # "100" alone reads as an integer: all are names
        (["+1", "1", "-0", "0"], ["+1", "-0", "0", "1"]),
    ],
)
def test_digit_labels_are_classes_as_written(tmp_path: Path, labels: list[str], names: list[str]) -> None:
    path = tmp_path / "codes.csv"
    path.write_text("text,label\n" + "".join(f"t{i},{label}\n" for i, label in enumerate(labels * 3)))
    data = load_text_classification(path, valid_fraction=0.3)
    assert data.label_names == names
    given = {f"t{i}": label for i, label in enumerate(labels * 3)}
    pairs = [*zip(data.train_texts, data.train_labels, strict=True), *zip(data.valid_texts, data.valid_labels, strict=True)]
    assert all(data.label_names[y] == given[text] for text, y in pairs)


def test_digit_labels_are_numbers_of_a_regression_and_a_huge_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "targets.csv"
    path.write_text("text,label\n" + "".join(f"t{i},{x}\n" for i, x in enumerate(["0.5", "007", "+2", "-1.5", "3"] * 2)))
    data = load_text_classification(path, valid_fraction=0.2, seed=1)
    assert data.task == "regression"
    assert sorted(data.train_labels + data.valid_labels) == sorted([0.5, 7.0, 2.0, -1.5, 3.0] * 2)
    for big in ("9" * 400, "0" + "9" * 400):  # an integer, and a digit name, beyond a float's range
        path.write_text(f"text,label\na,0.5\nb,{big}\nc,0.25\nd,1.5\n")
        with pytest.raises(DataError, match=r"targets\.csv line 3 has label .*, which is not a finite number"):
            load_text_classification(path, valid_fraction=0.25)


@pytest.mark.parametrize("cell", ["pos ", " pos", "\u00a0pos", "neg|pos "])
def test_a_label_with_whitespace_around_it_is_refused_not_trimmed(tmp_path: Path, cell: str) -> None:
    """"pos " and "pos" were merged into one class; taken as written they would be two: the user says which."""
    path = tmp_path / "spaced.jsonl"
    task = "multi_label" if "|" in cell else "auto"
    rows = [{"text": f"t{i}", "label": label} for i, label in enumerate(["pos", "neg", cell, "pos", "neg"])]
    with pytest.raises(DataError, match=r"spaced\.jsonl line 3 has label .* with whitespace around it; labels are taken as written"):
        load_text_classification(_jsonl(path, rows), valid_fraction=0.3, task=task)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ([1, 0, 1.0], r"labels are whole numbers written with decimals \(1\.0, .*line 3\); set task: regression"),
        ([1, 0, {"a": 1}], r'line 3 has label \{"a": 1\}, an object; labels must be integers, numbers, strings or lists'),
        ([1, 0, [1]], r"labels mix integers and label sets: 1 \(.*line 1\) and \[1\] \(.*line 3\)"),
        ([True, False], r"line 1 has label true, a boolean"),
        ([1, 0, "1O"], r"labels mix integers and strings: 1 \(data file .*d.jsonl line 1\) and '1O' \(data file .*line 3\)"),
        ([1, 0, None], r"line 3 has no label"),
    ],
)
def test_labels_that_are_neither_integers_nor_strings_are_refused(tmp_path: Path, labels: list[object], expected: str) -> None:
    rows = [{"text": f"t{i}", "label": label} for i, label in enumerate(labels)]
    with pytest.raises(DataError, match=expected):
        load_text_classification(_jsonl(tmp_path / "d.jsonl", rows), valid_fraction=0.3)


def test_integer_and_string_labels_across_train_and_validation_are_refused(tmp_path: Path) -> None:
    train = tmp_path / "train.csv"
    train.write_text("text,label\na,1\nb,0\n")
    valid = tmp_path / "valid.csv"
    valid.write_text("text,label\nc,one\n")
    with pytest.raises(DataError, match=r"labels mix integers and strings: 1 .*train\.csv line 2.* and 'one' .*valid\.csv line 2"):
        load_text_classification(train, valid_path=valid)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, r"line 2 has 0 in column 'text', a number, not a text; write it as a string"),
        (["a", "b"], r'line 2 has \["a", "b"\] in column \'text\', a list, not a text'),
    ],
)
def test_json_texts_must_be_strings(tmp_path: Path, text: object, expected: str) -> None:
    rows = [{"text": "fine", "label": 1}, {"text": text, "label": 0}, {"text": "ok", "label": 0}]
    with pytest.raises(DataError, match=expected):
        load_text_classification(_jsonl(tmp_path / "d.jsonl", rows), valid_fraction=0.34)


def test_json_null_text_is_empty_and_a_missing_key_is_refused(tmp_path: Path) -> None:
    rows = [{"text": "a", "label": 1}, {"text": None, "label": 0}, {"text": "b", "label": 0}, {"text": "c", "label": 1}]
    assert load_text_classification(_jsonl(tmp_path / "d.jsonl", rows), valid_fraction=0.34).dropped_empty == 1
    rows[1] = {"label": 0}
    with pytest.raises(DataError, match=r"line 2 has no 'text'; give every row a 'text'"):
        load_text_classification(_jsonl(tmp_path / "d.jsonl", rows), valid_fraction=0.34)


def test_a_byte_order_mark_is_not_part_of_a_column_name(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes("text,label\na,1\nb,0\nc,1\n".encode("utf-8-sig"))
    assert load_text_classification(path, valid_fraction=0.34).label_names == ["0", "1"]
    path.write_bytes("sentence ,label\na,1\nb,0\n".encode("utf-8-sig"))
    with pytest.raises(DataError, match=r"has no column 'text' \(found: 'sentence ', 'label'\); set --text-column"):
        load_text_classification(path, valid_fraction=0.34)


def test_a_json_array_of_records_is_read_and_a_single_object_is_named(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"text": f"t{i}", "label": i % 2} for i in range(6)], indent=2))
    data = load_text_classification(path, valid_fraction=0.34)
    assert len(data.train_texts) + len(data.valid_texts) == 6
    path.write_text(json.dumps({"data": [{"text": "a", "label": 1}]}, indent=2))
    with pytest.raises(DataError, match="holds one JSON object, not one record per line; write JSON Lines"):
        load_text_classification(path)
    path.write_text(json.dumps([{"text": "a", "label": 1}, "b"]))
    with pytest.raises(DataError, match="item 2 of its JSON array is not an object"):
        load_text_classification(path)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        # The lenient csv reader took '"hi" there' as 'hi there' and '"x"y"z"' as 'xy"z"': texts changed without a word.
        ("d.csv", b'text,label\n"hi" there,1\nbad,0\ngood,1\n',
         'line 2 is not valid CSV (\',\' expected after \'"\'); quote fields that hold a comma, a quote or a line break, the whole '
         "field, with each quote inside written twice"),
        ("d.csv", b'text,label\n"x"y"z",1\nbad,0\ngood,1\n', "line 2 is not valid CSV"),
        # JSON Lines whose first line is an array was read as one JSON document: "Extra data on line 2", a good line.
        ("d.jsonl", b'[1,2]\n{"text":"good","label":1}\n{"text":"bad","label":0}\n',
         "line 1 is not a JSON object; write one object per line"),
        ("d.json", b'[{"text":"good","label":1},\n{"text":"bad","label":0}]\n]\n', "is not valid JSON (Extra data on line 3); fix it"),
        # Not text at all: "re-save it as UTF-8" was no fix.
        ("d.tsv", gzip.compress(b"text\tlabel\na\t1\nb\t0\n", mtime=0), "is gzip-compressed, not text; extract it (gunzip) and pass the"),
        ("d.tsv", b"text\tlabel\na\t1\nb\t0\nc\t1\nd\n", "line 5 has 1 TSV field but the header has 2"),
    ],
    ids=["csv-text-after-a-quote", "csv-quotes-inside", "jsonl-array-first", "json-array-then-more", "gzip", "tsv-one-field"],
)
def test_files_the_reader_cannot_take_as_they_are_are_refused_saying_why(tmp_path: Path, name: str, content: bytes, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError, match=re.escape(expected)):
        load_text_classification(path, valid_fraction=0.34)


def test_rows_with_a_wrong_number_of_fields_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,label\ngood,1\ngood, really,1\n")  # the comma in the text is not quoted
    with pytest.raises(DataError, match="line 3 has 3 CSV fields but the header has 2; quote fields"):
        load_text_classification(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_non_files_are_named_for_what_they_are(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="is a directory but not a dataset saved with save_to_disk"):
        load_text_classification(tmp_path)
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match=r"is a FIFO \(named pipe\), not a regular file"):
        load_text_classification(fifo)  # refused without opening it: opening a FIFO would block
    if Path("/dev/null").exists():
        with pytest.raises(DataError, match="is a character device, not a regular file"):
            load_text_classification("/dev/null")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"text": "a", "label": 1}\n{"text": "b", "label": 1.0}\n', "labels are whole numbers written with decimals"),
        ('{"text": "a", "label": 1}\n{"text": 0, "label": 0}\n', "has 0 in column 'text', a number, not a text"),
        ('{"text": "a", "label": 1}\n{"text": "b", "label": "x"}\n', "labels mix integers and strings"),
    ],
)
def test_bad_values_on_the_command_line_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, expected: str
) -> None:
    from hpo.cli._run import main

    path = tmp_path / "d.jsonl"
    path.write_text(body * 3)
    db = tmp_path / "s.db"
    assert main(["--data", str(path), "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert not db.exists()
