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
    if key is not None:
        (path / OWNER_FILE).write_text(key + "\n", encoding="utf-8")
    return path


def remove_dead_workers_scratch(root: Path | None = None) -> list[Path]:
    """Remove the scratch directories under ``root`` (default: the temp directory) whose worker here has exited."""
    removed = []
    for path in sorted(Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        try:
            key = (path / OWNER_FILE).read_text(encoding="utf-8").strip()
        except OSError:  # not a directory of ours, one without a key, or one being removed by another worker
            continue
        if has_exited(key):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        _logger.info("removed %d scratch directories of workers that exited: %s", len(removed), ", ".join(p.name for p in removed))
    return removed
