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


def test_what_no_sweep_can_take_for_a_dead_workers_directory_is_left(tmp_path: Path) -> None:
    """A symlink named like one (never followed), a key that is not text, and a key written halfway are skipped; a directory
    that cannot be emptied keeps its key, so that a later sweep tries again."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead_key = process_key(child.pid)
    assert dead_key is not None
    child.kill()
    child.wait(timeout=30)
    target = _marked(tmp_path, "elsewhere", dead_key)
    (tmp_path / "hpo-trial-1-link").symlink_to(target, target_is_directory=True)
    binary = _marked(tmp_path, "hpo-trial-2-bin", None)
    (binary / OWNER_FILE).write_bytes(b"\xff\xfe not utf-8")
    partial = _marked(tmp_path, "hpo-trial-3-partial", None)
    (partial / f"{OWNER_FILE}.partial").write_text(dead_key[:-3])
    stuck = _marked(tmp_path, "hpo-trial-4-stuck", dead_key)
    (stuck / "latest").chmod(0o500)  # its checkpoint cannot be removed (as on a read-only mount)
    try:
        if os.geteuid() == 0:  # root removes it anyway: nothing stuck to show
            assert remove_dead_workers_scratch(tmp_path) == [stuck]
        else:
            assert remove_dead_workers_scratch(tmp_path) == []
            assert (stuck / OWNER_FILE).read_text().strip() == dead_key  # its key kept: tried again next time
            (stuck / "latest").chmod(0o700)
            assert remove_dead_workers_scratch(tmp_path) == [stuck]
    finally:
        if (stuck / "latest").exists():
            (stuck / "latest").chmod(0o700)
    assert target.is_dir() and (target / "latest" / "checkpoint.pt").is_file() and binary.is_dir() and partial.is_dir()
    assert not stuck.exists()
