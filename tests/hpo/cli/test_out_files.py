"""Where the commands write: ``--out`` through a link or into a FIFO, default directories named after the study."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import optuna
import pytest

from hpo.__main__ import main as hpo_main


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
