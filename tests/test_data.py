"""Loading labelled text files, and the one-line errors for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_tsv

from trial_executor import DataError, load_text_classification


def test_tsv_with_string_labels(tmp_path: Path) -> None:
    rows = [(f"question {i}", label) for i, label in enumerate(["LOC", "HUM", "NUM", "DESC", "ENTY", "ABBR"] * 5)]
    data = load_text_classification(write_tsv(tmp_path / "q.tsv", rows), text_column="sentence", valid_fraction=0.2, seed=1)
    assert data.label_names == ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    assert len(data.train_texts) == 24 and len(data.valid_texts) == 6
    for text, label in zip(data.train_texts, data.train_labels, strict=True):
        assert rows[int(text.split()[1])][1] == data.label_names[label]


def test_csv_and_jsonl_with_int_labels_and_a_validation_file(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text('text,label\n"good, really",1\nbad,0\nfine,2\nmeh,10\n')
    (tmp_path / "valid.jsonl").write_text("\n".join(json.dumps({"text": t, "label": y}) for t, y in [("ok", 1), ("no", 10)]) + "\n")
    data = load_text_classification(tmp_path / "train.csv", valid_path=tmp_path / "valid.jsonl")
    assert data.label_names == ["0", "1", "2", "10"]  # numeric order, not alphabetical
    assert data.train_texts[0] == "good, really"
    assert data.valid_labels == [1, 3]


def test_same_data_same_fingerprint(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "d.tsv", [(f"t{i}", i % 2) for i in range(20)])
    first = load_text_classification(path, text_column="sentence", seed=0)
    assert first.fingerprint == load_text_classification(path, text_column="sentence", seed=0).fingerprint
    assert first.fingerprint != load_text_classification(path, text_column="sentence", seed=1).fingerprint


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "not found"),
        (b"", "has no rows"),
        (b"sentence\tgold\nx\t1\ny\t0\n", "has no column 'label' (found: sentence, gold); set --label-column"),
        (b"sentence\tlabel\nx\t1\ny\t1\nz\t1\n", "single class"),
        (b"sentence\tlabel\nok\t1\nbad \xff\xfe\t0\n", "not UTF-8 (bad bytes on line 3)"),
    ],
)
def test_bad_data_files(tmp_path: Path, content: bytes | None, expected: str) -> None:
    path = tmp_path / "data.tsv"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        load_text_classification(path, text_column="sentence", valid_fraction=0.34)


def test_validation_label_unseen_in_training(tmp_path: Path) -> None:
    train = write_tsv(tmp_path / "train.tsv", [("a", "x"), ("b", "y")])
    valid = write_tsv(tmp_path / "valid.tsv", [("c", "z")])
    with pytest.raises(DataError, match=r"validation labels \['z'\] never occur in training"):
        load_text_classification(train, text_column="sentence", valid_path=valid)
