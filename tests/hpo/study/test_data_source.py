"""The data flags a study stores (hpo.study._data): named when other data is given, read again by its verdict."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from conftest import write_tsv

import hpo
from hpo._api import open_run
from hpo.study._data import data_flags, data_source_of, stored_data
from hpo.study._options import RunOptions
from trial_executor import demo_dataset

OPTIONS = {"text_column": "review text", "label_column": "label", "text_pair_column": None, "valid_data": None,
           "valid_fraction": 0.1, "holdout": None, "empty_text": "fail"}


def test_flags_read_the_same_file_again_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "my data"
    folder.mkdir()
    (folder / "dev.tsv").write_text("x")
    (folder / "train.tsv").write_text("x")
    monkeypatch.chdir(folder)
    source = data_source_of("train.tsv", {**OPTIONS, "valid_data": "dev.tsv"})
    assert source is not None and source["data"] == str(folder / "train.tsv") and source["valid_data"] == str(folder / "dev.tsv")
    # Quoted for a shell: the path with a space and the column name with one are one argument each.
    assert shlex.split(data_flags(source)) == ["--data", str(folder / "train.tsv"), "--text-column", "review text",
                                              "--label-column", "label", "--valid-data", str(folder / "dev.tsv"), "--empty-text", "fail"]
    data, options = stored_data(source, {**OPTIONS, "text_column": "text", "empty_text": "drop"})
    assert data == str(folder / "train.tsv") and options == {**OPTIONS, "valid_data": str(folder / "dev.tsv")}


def test_regression_data_stores_the_random_hold_out_its_rows_were(tmp_path: Path) -> None:
    """It stored "stratified" (the flag's default), which only classification is: the flags it gave back said so too."""
    train = write_tsv(tmp_path / "scores.tsv", [(f"review number {i}", f"{i / 10:.1f}") for i in range(40)])
    space = {"objective": {"metric": "rmse", "direction": "minimize"}, "params": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}}}
    opened = open_run(space, str(train), RunOptions(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="scores", device="cpu",
                                                  artifact_store=None, text_column="sentence"), announce=None)
    assert opened.prepared.data.task == "regression"
    assert opened.prepared.study.user_attrs["data_source"]["holdout"] == "random"
    assert data_source_of(str(train), OPTIONS, "multi_label")["holdout"] == "random"
    assert data_source_of(str(train), OPTIONS, "classification")["holdout"] == "stratified"


def test_validation_rows_that_repeat_training_rows_are_counted_and_said_never_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """TREC's test file repeats 10 of its 500 questions from its training file, and SST-2's training file 76 of the 6,735
    rows a 0.1 hold-out draws from it: their scores were taken for scores on unseen text, without a word."""
    from hpo.study._data import resolve_data

    train = write_tsv(tmp_path / "train.tsv", [(f"review {i}", i % 2) for i in range(30)])
    dev = write_tsv(tmp_path / "dev.tsv", [("review 3", 1), ("review 4", 1), ("unseen", 0)])  # review 4: another label, same text
    data = resolve_data(str(train), text_column="sentence", valid_data=str(dev))
    assert data.valid_rows_seen_in_training == 2 and data.valid_texts == ["review 3", "review 4", "unseen"]  # kept as given
    assert capsys.readouterr().err == (
        "warning: 2 of 3 validation rows of the --valid-data file are also training rows, text for text: their scores measure "
        "recall more than unseen text; remove the repeats to score unseen text only\n")
    repeated = write_tsv(tmp_path / "repeated.tsv", [(f"review {i % 10}", i % 2) for i in range(40)])  # each text four times
    held = resolve_data(str(repeated), text_column="sentence", valid_fraction=0.25)
    assert held.valid_rows_seen_in_training == 10 and len(held.valid_texts) == 10
    assert f"10 of 10 validation rows of the --valid-fraction hold-out ({repeated} repeats them)" in capsys.readouterr().err
    resolve_data(str(repeated), text_column="sentence", valid_fraction=0.25, warn=False)  # read again: said once
    clean = resolve_data(str(train), text_column="sentence")
    assert clean.valid_rows_seen_in_training == 0 and capsys.readouterr().err == ""


def test_a_hold_out_smaller_than_its_fraction_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each class keeps a row for training: 0.9 of 30 classes of two rows held out 30 rows, not 54, without a word."""
    from hpo.study._data import resolve_data

    pairs = write_tsv(tmp_path / "pairs.tsv", [(f"review {i}", f"c{i % 30}") for i in range(60)])
    data = resolve_data(str(pairs), text_column="sentence", valid_fraction=0.9)
    assert len(data.valid_texts) == 30
    assert capsys.readouterr().err == ("warning: --valid-fraction 0.9 held out 30 of 60 rows, not 54: a stratified hold-out "
                                       "keeps a row of each class for training\n")
    resolve_data(str(pairs), text_column="sentence", valid_fraction=0.4)  # 24 of 60: as asked, nothing said
    assert capsys.readouterr().err == ""


def test_the_run_says_its_data_warnings_and_its_workers_do_not_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Each process of --workers N read the data again and said its warnings again: three times for two workers."""
    from hpo.study._workers import WORKER_INDEX_ENV

    data = write_tsv(tmp_path / "d.tsv", [(f"review {i % 20}", i % 2) for i in range(40)])  # each text twice
    options = RunOptions(storage=f"sqlite:///{tmp_path / 's.db'}", device="cpu", artifact_store=None, text_column="sentence")
    open_run(None, str(data), options, announce=None)
    assert capsys.readouterr().err.count("validation rows of the --valid-fraction hold-out") == 1
    monkeypatch.setenv(WORKER_INDEX_ENV, "1")
    assert open_run(None, str(data), options, announce=None).prepared.data.valid_rows_seen_in_training > 0
    assert capsys.readouterr().err == ""


def test_the_demo_and_a_dataset_given_in_python() -> None:
    assert data_source_of(None, OPTIONS) == {} and data_flags({}) == "no --data (the demo reviews)"
    assert stored_data({}, OPTIONS) == (None, OPTIONS)  # the demo again
    assert data_source_of(demo_dataset(n_train=8, n_valid=4), OPTIONS) is None  # nothing can name it: nothing stored
    assert stored_data(None, OPTIONS) == (None, OPTIONS)


def test_a_moved_file_is_one_line_naming_the_flags(tmp_path: Path) -> None:
    source = {"data": str(tmp_path / "gone.tsv"), **{k: v for k, v in OPTIONS.items() if k != "seed"}}
    with pytest.raises(hpo.UserError, match=r"the study ran with --data \S+gone.tsv .*, but \S+gone.tsv is not on this machine; pass --data"):
        stored_data(source, OPTIONS)


def test_a_run_with_another_seed_reads_the_same_data(tmp_path: Path) -> None:
    # --seed seeds the trials, never the data: the demo reviews and a --valid-fraction hold-out are
    # drawn the same, so a study's best trial is retrained with any seed (a study keeps its own: hpo.study._resuming).
    train = write_tsv(tmp_path / "train.tsv", [(f"{word} review number {i}", i % 2) for i, word in enumerate(["good", "bad"] * 40)])
    for name, data, flags in (("demo", None, {}), ("held-out", str(train), {"text_column": "sentence", "valid_fraction": 0.25})):
        opened = [open_run(None, data, RunOptions(storage=f"sqlite:///{tmp_path / 's.db'}", study_name=f"{name}-{seed}", seed=seed,
                                                   device="cpu", artifact_store=None, **flags), announce=None)
                  for seed in (0, 7)]
        assert opened[0].prepared.data.fingerprint == opened[1].prepared.data.fingerprint


def test_a_study_made_before_the_holdout_flag_resumes_on_its_random_hold_out_unless_told_otherwise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A study whose stored data flags name no hold-out was made when every hold-out was drawn at random: a run (or a
    verdict) that names none reads its file held out that way again (its dropped rows said once, not once per reading);
    one that asks for stratified is refused in one line naming the flags that read the study's data."""
    from hpo._api import open_existing
    from hpo._attrs import DATA_SOURCE_ATTR

    rows = [(f"{word} review number {i}", word) for i, word in enumerate(["good", "bad", "bad"] * 20)]
    train = write_tsv(tmp_path / "train.tsv", [*rows, ("", "good")])
    options = {"storage": f"sqlite:///{tmp_path / 's.db'}", "study_name": "earlier", "device": "cpu", "artifact_store": None,
               "text_column": "sentence", "valid_fraction": 0.25}
    made = open_run(None, str(train), RunOptions(**options, holdout="random"), announce=None).prepared
    source = made.study.user_attrs[DATA_SOURCE_ATTR]
    made.study.set_user_attr(DATA_SOURCE_ATTR, {k: v for k, v in source.items() if k != "holdout"})  # as that version stored it

    with pytest.raises(hpo.UserError, match=r"created on different data .*: it ran with --data \S+train.tsv --text-column sentence "
                                            r"--label-column label --valid-fraction 0.25 --holdout random, this run with --data \S+train.tsv "
                                            r"--text-column sentence --label-column label --valid-fraction 0.25; rerun with its original data"):
        open_run(None, str(train), RunOptions(**options, holdout="stratified"), announce=None)
    capsys.readouterr()
    resumed = open_run(None, str(train), RunOptions(**options), announce=None).prepared  # no --holdout: the study's own
    assert capsys.readouterr().err.count("warning: dropped 1 rows with empty text") == 1
    assert resumed.data.fingerprint == made.data.fingerprint and resumed.study.user_attrs[DATA_SOURCE_ATTR]["holdout"] == "random"
    assert open_run(None, str(train), RunOptions(**options), announce=None).prepared.data.fingerprint == made.data.fingerprint

    made.study.set_user_attr(DATA_SOURCE_ATTR, None)  # older still: made before data flags were stored
    resumed = open_run(None, str(train), RunOptions(**options), announce=None).prepared
    assert resumed.data.fingerprint == made.data.fingerprint and resumed.study.user_attrs[DATA_SOURCE_ATTR]["holdout"] == "random"
    made.study.set_user_attr(DATA_SOURCE_ATTR, None)
    other = write_tsv(tmp_path / "other.tsv", [(f"other review {i}", word) for i, word in enumerate(["good", "bad", "bad"] * 20)])
    with pytest.raises(hpo.UserError, match=rf"created on different data \(fingerprint {made.data.fingerprint}, now "):
        open_run(None, str(other), RunOptions(**options), announce=None)  # other data, however it is held out

    made.study.set_user_attr(DATA_SOURCE_ATTR, {k: v for k, v in source.items() if k != "holdout"})
    verdict = RunOptions(**{k: v for k, v in options.items() if k != "valid_fraction"})
    assert open_existing(None, None, verdict).data.fingerprint == made.data.fingerprint  # the stored flags
    again = open_existing(None, str(train), verdict.model_copy(update={"valid_fraction": 0.25}))  # another copy, named
    assert again.data.fingerprint == made.data.fingerprint
    made.study.set_user_attr(DATA_SOURCE_ATTR, None)
    assert open_existing(None, str(train), verdict.model_copy(update={"valid_fraction": 0.25})).data.fingerprint == made.data.fingerprint


def test_holdout_is_one_of_two_and_only_with_a_hold_out() -> None:
    with pytest.raises(hpo.UserError, match=r"^--holdout must be stratified or random, got 'classes'; pass one of them$"):
        RunOptions(holdout="classes")
    with pytest.raises(hpo.UserError, match=r"^--holdout random draws the --valid-fraction hold-out, and --valid-data holds out nothing; drop one$"):
        RunOptions(holdout="random", valid_data="dev.tsv")


@pytest.mark.parametrize("flag", [{"valid_data": "dev.tsv"}, {"text_column": "sentence"}, {"holdout": "random"}, {"valid_fraction": 0.2}])
def test_a_data_flag_beside_a_dataset_given_in_python_is_refused_before_anything_is_written(tmp_path: Path, flag: dict[str, object]) -> None:
    # These were ignored: the run trained on the dataset's own splits, the file named never read.
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    with pytest.raises(hpo.UserError) as refused:
        hpo.optimize(None, demo_dataset(n_train=32, n_valid=8), storage=url, study_name="given", n_trials=1, **flag)
    name = next(iter(flag))
    assert str(refused.value) == (f"{name} reads a data file, and the data given is a TextClassificationData with its splits "
                                  f"already made; drop {name}, or pass the file as data")
    assert not (tmp_path / "studies.db").exists()


def test_data_refused_names_this_runs_flags_too_where_one_is_a_default(tmp_path: Path) -> None:
    """A study made without --valid-fraction (its default 0.1) resumed with --valid-fraction 0.2: the line listed the
    study's flags only, which leave a default out, so nothing in it said what differed."""
    train = write_tsv(tmp_path / "train.tsv", [(f"{word} review number {i}", word) for i, word in enumerate(["good", "bad"] * 30)])
    options = {"storage": f"sqlite:///{tmp_path / 'v.db'}", "study_name": "v", "device": "cpu", "artifact_store": None,
               "text_column": "sentence"}
    open_run(None, str(train), RunOptions(**options), announce=None)
    with pytest.raises(hpo.UserError, match=r"it ran with --data \S+ --text-column sentence --label-column label, this run with --data \S+ "
                                            r"--text-column sentence --label-column label --valid-fraction 0.2; rerun"):
        open_run(None, str(train), RunOptions(**options, valid_fraction=0.2), announce=None)
