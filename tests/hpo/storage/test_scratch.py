"""Scratch directories of trials: marked with their worker's process, removed once that process has exited here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpo._process import process_key
from hpo.storage._scratch import OWNER_FILE, remove_dead_workers_scratch, scratch_dir


def _marked(root: Path, name: str, key: str | None) -> Path:
    path = root / name
    path.mkdir()
    (path / "latest").mkdir()
    (path / "latest" / "checkpoint.pt").write_bytes(b"weights")
    if key is not None:
        (path / OWNER_FILE).write_text(key + "\n")
    return path


def test_only_directories_of_workers_that_exited_here_are_removed(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead_key = process_key(child.pid)
    assert dead_key is not None
    child.kill()
    child.wait(timeout=30)
    mine = process_key(os.getpid())
    assert mine is not None
    _boot, namespace, _pid, _started = mine.rsplit("/", 3)
    dead = _marked(tmp_path, "hpo-trial-3-abc", dead_key)
    kept = [
        _marked(tmp_path, "hpo-trial-4-def", mine),  # a live worker's (this process)
        _marked(tmp_path, "hpo-trial-5-ghi", f"another-boot/{namespace}/{child.pid}/1"),  # another boot: cannot be checked
        _marked(tmp_path, "hpo-trial-6-jkl", None),  # no key: an older version's, or one being made
        _marked(tmp_path, "hpo-trial-7-mno", "not a key"),
        _marked(tmp_path, "other-3-abc", dead_key),  # not ours
    ]
    (tmp_path / "hpo-trial-8-file").write_text("a file, not a directory")
    assert remove_dead_workers_scratch(tmp_path) == [dead]
    assert not dead.exists() and all(path.is_dir() for path in kept) and (tmp_path / "hpo-trial-8-file").is_file()
    assert remove_dead_workers_scratch(tmp_path) == []


def test_a_trial_scratch_directory_names_its_trial_and_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    path = scratch_dir(12, "model")
    assert path.parent == tmp_path and path.name.startswith("hpo-trial-12-model-")
    assert (path / OWNER_FILE).read_text().strip() == process_key(os.getpid())
    assert remove_dead_workers_scratch(tmp_path) == [] and path.is_dir()  # this process is alive
