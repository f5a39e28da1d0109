"""Loading labelled text files, and the one-line errors for bad ones."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from conftest import write_tsv

from trial_executor import DataError, TextClassificationData, demo_dataset, load_text_classification, make_synthetic_reviews


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


def test_a_validation_row_repeats_a_training_row_only_with_its_text_and_its_pair() -> None:
    data = TextClassificationData(
        train_texts=["a", "b", "c"], train_labels=[0, 1, 0], valid_texts=["a", "b", "d"], valid_labels=[1, 1, 0],
        label_names=["x", "y"], train_pairs=["p", "q", "r"], valid_pairs=["p", "other", "r"],
    )
    assert data.valid_rows_seen_in_training == 1  # ("a", "p"); "b" comes with another second text, "d" is new
    assert TextClassificationData(["a", "b"], [0, 1], ["a", "a"], [0, 1], ["x", "y"]).valid_rows_seen_in_training == 2


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
        (b"sentence\tgold\nx\t1\ny\t0\n", "has no column 'label' (found: 'sentence', 'gold'); set --label-column"),
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


def test_a_missing_validation_file_is_named_as_such_and_the_training_file_is_refused_as_its_own_validation(tmp_path: Path) -> None:
    train = write_tsv(tmp_path / "train.tsv", [(f"t{i}", i % 2) for i in range(6)])
    with pytest.raises(DataError, match=r"^validation file \S+dev.tsv \(--valid-data\) not found; pass an existing"):
        load_text_classification(train, text_column="sentence", valid_path=tmp_path / "dev.tsv")
    (tmp_path / "sub").mkdir()
    for same in (train, tmp_path / "sub" / ".." / "train.tsv"):  # the same file, however the path is written
        with pytest.raises(DataError, match=r"is the training file \(--data\) itself.*drop --valid-data"):
            load_text_classification(train, text_column="sentence", valid_path=same)
    copy = write_tsv(tmp_path / "copy.tsv", [(f"t{i}", i % 2) for i in range(6)])  # a file of its own is taken as given
    assert len(load_text_classification(train, text_column="sentence", valid_path=copy).valid_texts) == 6


def test_validation_label_unseen_in_training(tmp_path: Path) -> None:
    train = write_tsv(tmp_path / "train.tsv", [("a", "x"), ("b", "y")])
    valid = write_tsv(tmp_path / "valid.tsv", [("c", "z")])
    with pytest.raises(DataError, match=r"validation labels \['z'\] never occur in training"):
        load_text_classification(train, text_column="sentence", valid_path=valid)


def test_a_class_the_random_hold_out_took_whole_is_named_with_the_fix_and_the_stratified_one_keeps_it(tmp_path: Path) -> None:
    # One 'rare' row among nine: whichever row the seeded random hold-out of one takes, only that placement fails; the
    # stratified hold-out (the default) never holds out a class's last row.
    failures = {}
    for position in range(10):
        path = write_tsv(tmp_path / f"data-{position}.tsv", [(f"text {i}", "rare" if i == position else "common") for i in range(10)])
        data = load_text_classification(path, text_column="sentence", valid_fraction=0.1)
        assert data.train_labels.count(data.label_names.index("rare")) == 1 and data.valid_labels == [data.label_names.index("common")]
        try:
            load_text_classification(path, text_column="sentence", valid_fraction=0.1, holdout="random")
        except DataError as err:
            failures[path] = str(err)
    [(path, message)] = failures.items()
    assert message == (f"validation labels ['rare'] never occur in training; the --valid-fraction 0.1 hold-out took every row "
                       f"of them from {path}; add rows of them, or pass a validation file (--valid-data)")


def test_the_stratified_hold_out_gives_each_class_its_share_and_the_random_one_is_the_earlier_split(tmp_path: Path) -> None:
    rows = [(f"text {i}", label) for i, label in enumerate(["common"] * 40 + ["rare"] * 9 + ["single"])]
    path = write_tsv(tmp_path / "classes.tsv", rows)
    data = load_text_classification(path, text_column="sentence", valid_fraction=0.2)
    held = [data.label_names[i] for i in data.valid_labels]
    # 10 rows held out of 50: 8 of the 40 common, 1.8 -> 2 of the 9 rare, 0.2 -> none of the single row
    assert len(held) == 10 and held.count("common") == 8 and held.count("rare") == 2
    assert sorted(data.train_texts + data.valid_texts) == sorted(text for text, _ in rows)  # every row once, as written
    assert data.valid_texts == sorted(data.valid_texts, key=lambda text: int(text.split()[1]))  # in file order
    # A study made before the stratified hold-out: "random" reads the very split it trained on (the earlier code's
    # fingerprints), for classes and for regression, which the stratified default also draws at random.
    assert load_text_classification(path, text_column="sentence", valid_fraction=0.2, holdout="random").fingerprint == "745c235451376029"
    numbers = write_tsv(tmp_path / "numbers.tsv", [(f"text {i}", str(i % 7 * 0.5 + 0.25)) for i in range(30)])
    for holdout in ("stratified", "random"):
        regression = load_text_classification(numbers, text_column="sentence", valid_fraction=0.2, holdout=holdout)
        assert regression.task == "regression" and regression.fingerprint == "eed52cb71f0b03b3"


def test_classes_too_small_for_their_share_leave_it_to_the_others(tmp_path: Path) -> None:
    # 30 classes of one row (none can be held out) and one of 70: the hold-out is still the share asked, all from the 70.
    path = write_tsv(tmp_path / "long-tail.tsv", [(f"text {i}", f"rare {i}" if i < 30 else "common") for i in range(100)])
    for fraction, wanted in ((0.1, 10), (0.3, 30), (0.5, 50)):
        data = load_text_classification(path, text_column="sentence", valid_fraction=fraction)
        assert [data.label_names[i] for i in data.valid_labels] == ["common"] * wanted and len(data.train_texts) == 100 - wanted


def test_a_hold_out_that_leaves_too_few_rows_to_train_on_names_the_fraction(tmp_path: Path) -> None:
    """--valid-fraction 0.99 of 40 rows said "has 40 usable rows, too few to hold out validation; add rows": the fraction was the fix."""
    path = write_tsv(tmp_path / "forty.tsv", [(f"text {i}", f"class {i % 2}") for i in range(40)])
    with pytest.raises(DataError, match=rf"^data file {path} has 40 usable rows: a --valid-fraction 0.99 hold-out takes 40, leaving 0 "
                                        r"to train on \(at least 2 are needed\); lower --valid-fraction, add rows, or pass a "):
        load_text_classification(path, text_column="sentence", valid_fraction=0.99)
    two = write_tsv(tmp_path / "two.tsv", [("a", "x"), ("b", "y")])
    with pytest.raises(DataError, match=r"has 2 usable rows: a --valid-fraction 0.1 hold-out takes 1, leaving 1 to train on "
                                        r"\(at least 2 are needed\); add rows, or pass a validation file"):
        load_text_classification(two, text_column="sentence", valid_fraction=0.1)


def test_a_stratified_hold_out_with_no_class_of_two_rows_is_one_line(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "singles.tsv", [(f"text {i}", f"class {i}") for i in range(5)])
    with pytest.raises(DataError, match=rf"^data file {path} has no class with two rows, so none can be held out for validation; "
                                        r"add rows, or pass a validation file \(--valid-data\)$"):
        load_text_classification(path, text_column="sentence", valid_fraction=0.2)
    with pytest.raises(DataError, match=r"^--holdout must be stratified or random, got 'by class'$"):
        load_text_classification(path, text_column="sentence", holdout="by class")


def test_text_pairs_and_empty_text_policy(tmp_path: Path) -> None:
    rows = "premise\thypothesis\tlabel\na cat\tan animal\tyes\n\tmissing\tno\nthe sky\tis green\tno\nrain\t\tyes\nsun\thot\tyes\n"
    path = tmp_path / "pairs.tsv"
    path.write_text(rows)
    data = load_text_classification(
        path, text_column="premise", text_pair_column="hypothesis", valid_fraction=0.34, seed=0
    )
    assert data.dropped_empty == 2
    assert sorted(data.train_texts + data.valid_texts) == ["a cat", "sun", "the sky"]
    assert data.train_pairs is not None and len(data.train_pairs) == len(data.train_texts)
    with pytest.raises(DataError, match=r"2 rows with empty text \(first: line 3\)"):
        load_text_classification(path, text_column="premise", text_pair_column="hypothesis", empty_text="fail")


def test_saved_datasets_directory_with_class_labels_and_validation_split(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="the [datasets] extra is part of [dev]")
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    train = datasets.Dataset.from_dict({"text": ["good", "bad", "great", "awful"], "label": [1, 0, 1, 0]}, features=features)
    valid = datasets.Dataset.from_dict({"text": ["fine"], "label": [1]}, features=features)
    datasets.DatasetDict({"train": train, "validation": valid}).save_to_disk(str(tmp_path / "saved"))
    data = load_text_classification(tmp_path / "saved")
    assert data.label_names == ["neg", "pos"]
    assert data.train_texts == ["good", "bad", "great", "awful"] and data.train_labels == [1, 0, 1, 0]
    assert data.valid_texts == ["fine"] and data.valid_labels == [1]
    # A test split's rows carry class id -1, no label: named, not a traceback from ClassLabel.int2str.
    unlabelled = datasets.Dataset.from_dict({"text": ["good", "bad", "meh"], "label": [1, 0, -1]}, features=features)
    unlabelled.save_to_disk(str(tmp_path / "test-split"))
    with pytest.raises(DataError, match=r"row 3 has class id -1 in column 'label', which names no class \(-1 is a row without a label"):
        load_text_classification(tmp_path / "test-split")


def test_class_label_names_are_taken_as_named_also_in_label_sets_and_a_validation_dict_gives_its_validation_split(
    tmp_path: Path,
) -> None:
    datasets = pytest.importorskip("datasets", reason="the [datasets] extra is part of [dev]")
    names = datasets.ClassLabel(names=["007", "7", "A"])  # "007" and "7" were both read as the integer 7
    features = datasets.Features({"text": datasets.Value("string"), "label": names})
    train = datasets.Dataset.from_dict({"text": ["a", "b", "c", "d"], "label": [0, 1, 0, 1]}, features=features)
    valid = datasets.Dataset.from_dict({"text": ["e"], "label": [1]}, features=features)
    datasets.DatasetDict({"train": train, "validation": valid}).save_to_disk(str(tmp_path / "codes"))
    data = load_text_classification(tmp_path / "codes")
    assert data.label_names == ["007", "7"] and data.train_labels == [0, 1, 0, 1] and data.valid_labels == [1]
    # --valid-data naming a saved DatasetDict validates on its validation split (it took the dict's train split).
    other = datasets.Dataset.from_dict({"text": ["f", "g", "h", "i"], "label": [1, 0, 1, 0]}, features=features)
    other.save_to_disk(str(tmp_path / "train-only"))
    data = load_text_classification(tmp_path / "train-only", valid_path=tmp_path / "codes")
    assert data.valid_texts == ["e"] and data.valid_labels == [1]
    # A multi-label column of ClassLabel ids: their names (they became '0', '1', '2').
    sets = datasets.Features({"text": datasets.Value("string"), "tags": datasets.Sequence(datasets.ClassLabel(names=["sport", "tech", "art"]))})
    rows = {"text": ["a", "b", "c", "d", "e"], "tags": [[0], [1, 2], [0, 2], [1], []]}
    datasets.Dataset.from_dict(rows, features=sets).save_to_disk(str(tmp_path / "sets"))
    data = load_text_classification(tmp_path / "sets", label_column="tags", task="multi_label", valid_fraction=0.2, seed=0)
    assert data.label_names == ["art", "sport", "tech"]


def test_bad_data_on_the_command_line_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hpo.cli._run import main

    path = write_tsv(tmp_path / "d.tsv", [("x", 1), ("y", 0)], header=("text", "gold"))
    db = tmp_path / "s.db"
    assert main(["--data", str(path), "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert "has no column 'label' (found: 'text', 'gold'); set --label-column" in err
    assert len(err.strip().splitlines()) == 1 and not db.exists()


ROWS = [{"sentence": f"text {i}", "label": i % 2} for i in range(6)]


def _jsonl(*extra: str) -> bytes:
    return "".join([*(json.dumps(row) + "\n" for row in ROWS), *extra]).encode()


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        # Each was a traceback, or (the key given twice) the last value taken silently.
        ("data.jsonl", _jsonl('{"sentence": "x", "label": 1, "label": 0}\n'), "line 7 cannot be read as JSON (the key 'label' twice in one object); fix that line"),
        ("data.jsonl", _jsonl('{"sentence": "x", "label": 1' + "0" * 5000 + "}\n"), "line 7 cannot be read as JSON (Exceeds the limit (4300 digits) for integer string conversion)"),
        ("data.json", b"[" * 100_000 + b"]" * 100_000, "cannot be read as JSON (nested too deeply); fix it"),
        ("data.jsonl", _jsonl('{"sentence": "half \\ud800 a pair", "label": 1}\n'), "line 7 column 'sentence' holds '\\ud800', half of a UTF-16 surrogate pair"),
        ("data.tsv", b"sentence\tlabel\nx\t1\ny\t0\nz\t" + b"1" * 5000 + b"\n", "line 4 has label \"1111"),
        # Each was named as another problem: a header of 0 fields, a missing column, a second class named 'label'.
        ("data.csv", b"\nsentence,label\nx,1\ny,0\n", "starts with a blank line where its header should be; remove the blank line"),
        ("data.csv", b"sentence\tlabel\nx\t1\ny\t0\n", "has a header of one CSV field, 'sentence\\tlabel', split by '\\t' instead"),
        ("data.tsv", b"sentence;label\nx;1\ny;0\n", "has a header of one TSV field, 'sentence;label', split by ';' instead"),
        ("data.csv", b"sentence,label\nx,a\ny,b\nsentence,label\nz,a\n", "line 4 repeats the header ('sentence', 'label'); remove it"),
        # A line of spaces read "has 1 CSV field but the header has 2; quote fields that hold a comma...": no quote was missing.
        ("data.csv", b"sentence,label\nx,a\ny,b\n  \nz,a\n", "line 4 holds only whitespace, no CSV fields; remove it (an empty line is skipped)"),
        ("data.tsv", b"sentence\tlabel\nx\ta\ny\tb\n \r\n", "line 4 holds only whitespace, no TSV fields; remove it"),
        # JSON Lines rows have their own keys: a first row without its text was "has no column 'sentence' (found: 'label')".
        ("data.jsonl", b'{"label": "a"}\n{"sentence": "x", "label": "b"}\n', "data.jsonl line 1 has no 'sentence'; give every row a 'sentence'"),
        # jq's output without -c was "line 1 is not valid JSON (Expecting property name ...); fix that line".
        ("data.jsonl", b'{\n  "sentence": "x",\n  "label": "a"\n}\n{\n  "sentence": "y",\n  "label": "b"\n}\n',
         "holds 2 JSON objects written over several lines each, not one per line; write each object on one line (JSON Lines; jq -c does)"),
        ("data.csv", b"sentence,label\n ,a\n,b\n", "has no row with a text (2 with empty text dropped); give it rows with text"),
    ],
    ids=["key twice", "json integer too long", "nested too deeply", "lone surrogate", "label integer too long",
         "blank first line", "tsv named csv", "semicolons", "header repeated", "whitespace line csv", "whitespace line tsv",
         "first json row without the column", "pretty-printed json lines", "no text"],
)
def test_json_and_labels_a_parser_cannot_take_as_they_are_are_one_line(tmp_path: Path, name: str, content: bytes, expected: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError) as refused:
        load_text_classification(tmp_path / name, text_column="sentence", valid_fraction=0.34)
    assert expected in str(refused.value), refused.value


def test_a_csv_text_longer_than_the_csv_modules_default_field_limit_is_read_whole(tmp_path: Path) -> None:
    long_text = "word " * 40_000  # 200,000 characters: the csv module's default limit is 131,072
    path = tmp_path / "data.csv"
    path.write_text(f'sentence,label\n"{long_text}",1\nshort,0\nother,1\nmore,0\n', encoding="utf-8")
    data = load_text_classification(path, text_column="sentence", valid_fraction=0.25)
    assert long_text in data.train_texts + data.valid_texts
    assert csv.field_size_limit() == 131_072  # the process's own setting comes back


def test_a_trailing_row_of_empty_cells_is_an_empty_text_not_a_missing_label(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("sentence,label\ngood,1\nbad,0\nfine,1\nawful,0\n,\n", encoding="utf-8")
    assert load_text_classification(path, text_column="sentence", valid_fraction=0.25, empty_text="drop").dropped_empty == 1
    with pytest.raises(DataError, match="1 rows with empty text"):
        load_text_classification(path, text_column="sentence", valid_fraction=0.25, empty_text="fail")


REVIEWS = ["good", "bad", "fine"]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # Whole-number regression targets as ints were taken as class ids (int64), truncating 2.5 to 2 in the same tensor.
        ({"train_labels": [3, 2.5, 0.5], "label_names": ["score"], "task": "regression"},
         "train_labels[0] is 3 (int); regression targets are finite Python floats (write a whole number as 3.0)"),
        ({"train_labels": [1, 0, 2]}, "train_labels[2] is 2 (int); classification targets are class ids, Python ints 0..1 (one per label name)"),
        ({"train_labels": [1, 0, True]}, "train_labels[2] is True (bool); classification targets are class ids, Python ints 0..1 (one per label name)"),
        ({"valid_labels": [0.0, 1.0, 1.0]}, "valid_labels[0] is 0.0 (float); classification targets are class ids, Python ints 0..1 (one per label name)"),
        ({"train_labels": [1, 0]}, "train_texts has 3 rows, train_labels 2; give one of each per row"),
        ({"valid_texts": ["ok", None, "no"]}, "valid_texts[1] is a NoneType; texts are str"),
        ({"task": "regresion"}, "task must be one of classification, regression, multi_label, got 'regresion'"),
        ({"train_labels": [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], "task": "multi_label"},
         "train_labels[1] is [0.0, 2.0] (list); multi_label targets are rows of 2 values, 1.0 for each of the row's labels and 0.0 for the others"),
        ({"label_names": ["only"]}, "classification needs at least two label_names, got ['only']"),
        # Each of these ran: characters as rows, a model trained on pairs scored on single texts, two outputs of one name.
        ({"train_texts": "abc"}, "train_texts is a str; give a list (list(...) of it)"),
        ({"label_names": "np"}, "label_names is a str; give a list (list(...) of it)"),
        ({"train_pairs": ["x", "y", "z"]}, "train_pairs is given but valid_pairs is not: a model trained on pairs is validated on pairs; give both, or neither"),
        ({"label_names": ["pos", "pos"]}, "label_names has 'pos' twice; name each output once"),
        ({"valid_texts": ["ok", " \t", "no"]}, "valid_texts[1] is empty; leave that row out, or give it its text"),
        ({"train_labels": [1, 1, 1]}, "train_labels holds a single class ('positive'); a classifier needs at least two"),
    ],
)
def test_data_built_in_python_is_checked_against_its_documented_form(fields: dict[str, object], expected: str) -> None:
    given: dict[str, object] = {
        "train_texts": REVIEWS, "train_labels": [1, 0, 1], "valid_texts": REVIEWS, "valid_labels": [1, 0, 0],
        "label_names": ["negative", "positive"], **fields,
    }
    if given.get("task") == "regression":
        given["valid_labels"] = [1.0, 0.5, 2.0]
    with pytest.raises(DataError) as raised:
        TextClassificationData(**given)  # type: ignore[arg-type]
    assert str(raised.value) == expected


@pytest.mark.parametrize(
    ("arguments", "error", "said"),
    [
        # Each was a TypeError from inside random ("'float' object cannot be interpreted as an integer"), a guess (True as one
        # row, then "train_labels holds a single class"), or an error about valid_texts for an n_valid the caller gave.
        ({"n_train": 1.5}, TypeError, "n_train must be a whole number, got 1.5; pass an int"),
        ({"n_train": True}, TypeError, "n_train must be a whole number, got True; pass an int"),
        ({"seed": None}, TypeError, "seed must be a whole number, got None; pass an int"),
        ({"n_valid": -1}, ValueError, "n_valid must be at least 1, got -1"),
        ({"n_train": 1}, ValueError, "n_train must be at least 2, got 1"),
    ],
)
def test_demo_dataset_refuses_counts_and_seeds_it_cannot_take_as_they_are(arguments: dict[str, object], error: type, said: str) -> None:
    with pytest.raises(error, match=f"^{re.escape(said)}$"):
        demo_dataset(**{"n_train": 40, "n_valid": 10, **arguments})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^seed must be a whole number, got 'a'; pass an int$"):  # random hashed the str
        make_synthetic_reviews(5, seed="a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^label_noise must be a fraction in \[0, 1\], got nan$"):
        make_synthetic_reviews(5, label_noise=float("nan"))
    with pytest.raises(TypeError, match=r"^label_noise must be a number, got '0.1'; pass a fraction in \[0, 1\]$"):
        make_synthetic_reviews(5, label_noise="0.1")  # type: ignore[arg-type]


def test_a_valid_fraction_that_is_no_number_is_one_data_error(tmp_path: Path) -> None:
    """valid_fraction='0.2' from Python was a TypeError ("'<' not supported between instances of 'int' and 'str')."""
    path = write_tsv(tmp_path / "t.tsv", [(f"row {i}", i % 2) for i in range(20)])
    for fraction, said in (("0.2", "'0.2'"), (None, "None"), ([0.2], "[0.2]"), (1.5, "1.5")):
        with pytest.raises(DataError, match=rf"^--valid-fraction must be a number between 0 and 1, got {re.escape(said)}$"):
            load_text_classification(path, text_column="sentence", valid_fraction=fraction)  # type: ignore[arg-type]
