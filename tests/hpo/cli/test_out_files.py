"""Where the commands write: ``--out`` through a link or into a FIFO, default directories named after the study."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import optuna
import pytest
from conftest import SMALL_SPACE

import hpo
from hpo.__main__ import main as hpo_main
from hpo.reporting._tracking import TensorBoardTracker


def _study(tmp_path: Path, name: str = "s") -> str:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={"config": {}}))
    return url


def test_export_through_a_symlink_writes_the_file_it_names_and_keeps_the_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The partial file was renamed onto the link: the link became a regular file, the file it named kept the old export."""
    url = _study(tmp_path)
    (tmp_path / "exports").mkdir()
    real = tmp_path / "exports" / "trials.json"
    real.write_text("yesterday's")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    assert hpo_main(["export", "--storage", url, "--format", "json", "--out", str(link)]) == 0, capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads(real.read_text())[0]["number"] == 0
    assert sorted(p.name for p in real.parent.iterdir()) == ["trials.json"]  # no partial file left beside it
    # A link to a file not there yet: the file is made where the link points.
    dangling = tmp_path / "next.json"
    dangling.symlink_to(tmp_path / "exports" / "next.json")
    assert hpo_main(["export", "--storage", url, "--format", "json", "--out", str(dangling)]) == 0
    assert dangling.is_symlink() and json.loads((tmp_path / "exports" / "next.json").read_text())[0]["number"] == 0


def test_export_into_a_fifo_reaches_its_reader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The FIFO was replaced by a regular file: its reader got nothing and the pipe was gone (as /dev/null was, run as root)."""
    url = _study(tmp_path)
    fifo = tmp_path / "trials.pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert hpo_main(["export", "--storage", url, "--format", "json", "--out", str(fifo)]) == 0, capsys.readouterr().err
    reader.join(timeout=30)
    assert not reader.is_alive() and json.loads(read[0])[0]["number"] == 0
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["e.db", "trials.pipe"]


def test_default_directories_keep_a_study_name_to_one_component(
    small_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """hpo-report-<name> and hpo-verdict-<name> took the raw name: 'x/../../escaped' wrote outside the working directory,
    'a/b' made nested directories (and TensorBoard's DIR/<study> climbed out of DIR)."""
    storage = f"sqlite:///{tmp_path / 'd.db'}"
    tiny = {**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
            "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}
    for name in ("x/../../escaped", ".a/b"):
        hpo.optimize(tiny, small_data, storage=storage, study_name=name, n_trials=1, device="cpu", artifact_store=None,
                     text_column="sentence")
    work = tmp_path / "w1" / "w2"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    assert hpo_main(["report", "--storage", storage, "--study-name", "x/../../escaped"]) == 0, capsys.readouterr().err
    assert hpo_main(["verdict", "--storage", storage, "--study-name", ".a/b", "--seeds", "2", "--device", "cpu", "--artifact-store", str(tmp_path / "store")]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in work.iterdir()) == ["hpo-report-x_.._.._escaped", "hpo-verdict-_a_b"]
    assert (work / "hpo-report-x_.._.._escaped" / "report.md").is_file() and (work / "hpo-verdict-_a_b" / "verdict.md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.db", "store", "w1"]
    tracker = TensorBoardTracker("../../escaped", tmp_path / "runs")
    assert tracker.root == tmp_path / "runs" / "___.._escaped" and sorted(p.name for p in tmp_path.iterdir()) == ["d.db", "runs", "store", "w1"]


def test_export_format_follows_the_out_extension_and_a_contradiction_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--format csv --out x.json wrote CSV into x.json without a word, and --format was required even when --out said it."""
    url = _study(tmp_path)
    assert hpo_main(["export", "--storage", url, "--out", str(tmp_path / "t.json")]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "t.json").read_text())[0]["number"] == 0
    assert hpo_main(["export", "--storage", url, "--out", str(tmp_path / "t.CSV")]) == 0
    assert (tmp_path / "t.CSV").read_text().startswith("number,state,")
    capsys.readouterr()
    assert hpo_main(["export", "--storage", url, "--format", "csv", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err == (f"python -m hpo.export: error: --format csv contradicts --out {tmp_path / 'x.json'} (a .json file); "
                   "name the file .csv, or drop --format\n")
    for argv, where in (([], "standard output has no file extension"), (["--out", str(tmp_path / "x.txt")], f"--out {tmp_path / 'x.txt'} has no .csv or .json extension")):
        assert hpo_main(["export", "--storage", url, *argv]) == 2
        assert capsys.readouterr().err == f"python -m hpo.export: error: --format is needed: {where}; pass --format csv or --format json\n"
    assert hpo_main(["export", "--storage", url, "--format", "json", "--out", str(tmp_path / "x.txt")]) == 0  # said, and no extension to contradict
    assert not (tmp_path / "x.json").exists() and json.loads((tmp_path / "x.txt").read_text())[0]["number"] == 0
