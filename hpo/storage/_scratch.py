"""A trial's scratch directories in the system's temp directory, and removing those a killed worker left.

A worker killed with SIGKILL (or by the OOM killer) cleans nothing: its trial's scratch directory
(a downloaded checkpoint to resume from, the checkpoints it wrote, a final model copy: each as
large as the model) would stay until the machine's temp directory is cleared. Each directory
holds its worker's process key (:mod:`hpo._process`); a worker starting on the same machine removes
those whose process has exited. Directories of another machine (a shared temp directory),
container or boot, and those without a key, are left alone.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from hpo._process import has_exited, process_key

OWNER_FILE = ".hpo-worker"
PREFIX = "hpo-trial-"
_logger = logging.getLogger(__name__)


def scratch_dir(trial_number: int, kind: str = "") -> Path:
    """A new directory ``hpo-trial-<n>-[<kind>-]*`` in the temp directory, marked as this process's."""
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{trial_number}-{kind + '-' if kind else ''}"))
    key = process_key(os.getpid())
    if key is not None:  # whole or not at all: a sweep never reads half a key (and takes a live worker's for a dead one's)
        partial = path / f"{OWNER_FILE}.partial"
        partial.write_text(key + "\n", encoding="utf-8")
        os.replace(partial, path / OWNER_FILE)
    return path


def remove_dead_workers_scratch(root: Path | None = None) -> list[Path]:
    """Remove the scratch directories under ``root`` (default: the temp directory) whose worker here has exited."""
    removed = []
    for path in sorted(Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        try:
            if path.is_symlink():  # not made by mkdtemp: never followed
                continue
            key = (path / OWNER_FILE).read_text(encoding="utf-8").strip()
        except (OSError, ValueError):  # not ours, no key, one being removed by another worker, or not a key's bytes
            continue
        if has_exited(key) and _remove(path):
            removed.append(path)
    if removed:
        _logger.info("removed %d scratch directories of workers that exited: %s", len(removed), ", ".join(p.name for p in removed))
    return removed


def _remove(path: Path) -> bool:
    """Remove ``path``, its key last: a removal cut short (a read-only mount, another worker sweeping) is tried again."""
    try:
        for child in path.iterdir():
            if child.name == OWNER_FILE:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink(missing_ok=True)
        (path / OWNER_FILE).unlink()
        path.rmdir()
    except OSError:
        return False
    return True
