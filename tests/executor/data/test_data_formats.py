"""A data format is one registered reader: a toy pipe-separated format, added here, loads and trains."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from trial_executor import DataError, TrainConfig, load_text_classification, make_synthetic_reviews, run_trial
from trial_executor.data import Records, register_format, unregister_format


def _read_psv(path: Path, handle: IO[str]) -> Records:
    """Pipe-separated values: a header row, then one record per line (no quoting)."""
    reader = csv.reader(handle, delimiter="|", quoting=csv.QUOTE_NONE)
    header = next(reader)
    rows, numbers = [], []
    for fields in reader:
        if fields:
            rows.append(dict(zip(header, fields, strict=True)))
            numbers.append(reader.line_num)
    return Records(rows, numbers, "line")


@pytest.fixture
def psv() -> Iterator[None]:
    register_format("PSV", ".psv")(_read_psv)
    try:
        yield
    finally:
        unregister_format("PSV")  # no other test sees it


def _write_psv(path: Path, n: int) -> Path:
    texts, labels = make_synthetic_reviews(n, seed=5)
    names = ["negative", "positive"]
    path.write_text("review|sentiment\n" + "".join(f"{text}|{names[y]}\n" for text, y in zip(texts, labels, strict=True)))
    return path


def test_a_registered_format_loads_and_trains_a_trial(tmp_path: Path, psv: None) -> None:
    path = _write_psv(tmp_path / "reviews.psv", 240)
    data = load_text_classification(path, text_column="review", label_column="sentiment", valid_fraction=0.25, seed=0)
    assert data.label_names == ["negative", "positive"] and len(data.train_texts) == 180 and len(data.valid_texts) == 60
    assert "|" not in "".join(data.train_texts)
    result = run_trial(TrainConfig(model="tiny-bert", epochs=1, batch_size=32, max_length=48, eval_every=0, device="cpu"), data)
    assert result.steps == 6 and 0.0 <= result.metrics["accuracy"] <= 1.0
    (tmp_path / "reviews.xml").write_text("<reviews/>")
    with pytest.raises(DataError, match=r"unknown extension '\.xml'; use \.csv, \.tsv, \.jsonl, \.json or \.psv$"):
        load_text_classification(tmp_path / "reviews.xml")
    with pytest.raises(DataError, match="pass an existing CSV, TSV, JSONL or PSV file"):
        load_text_classification(tmp_path / "missing.psv")
    with pytest.raises(ValueError, match=r"suffix \.PSV is read as PSV already"):
        register_format("Pipes", ".PSV")(_read_psv)


def test_formats_and_messages_come_from_the_table(tmp_path: Path) -> None:
    path = _write_psv(tmp_path / "reviews.psv", 20)
    with pytest.raises(DataError, match=r"has an unknown extension '\.psv'; use \.csv, \.tsv, \.jsonl or \.json$"):
        load_text_classification(path)
    with pytest.raises(DataError, match="pass an existing CSV, TSV or JSONL file or a saved dataset directory"):
        load_text_classification(tmp_path / "missing.csv")
