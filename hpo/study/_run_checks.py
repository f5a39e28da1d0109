"""A run's options checked before storage is touched: each bad value is one :class:`UserError` naming the fix.

Plain functions of plain values; :class:`hpo.study._options.RunOptions` calls them when it is
built, so the command line and a Python caller check the same way.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path

from hpo._errors import UserError
from trial_executor import SEED_RANGE

# Optuna's studies.study_name column is String(512) (MAX_INDEXED_STRING_LENGTH); PostgreSQL
# refuses a longer name, so refuse it here first, on every database alike.
MAX_STUDY_NAME_LENGTH = 512


def check_seed(seed: int) -> None:
    low, high = SEED_RANGE
    if not low <= seed <= high:
        raise UserError(f"--seed {seed} is outside {low}..{high} (2^32 - 1); pass a seed in that range")


def check_device(device: str) -> None:
    """``cuda`` needs a CUDA device that torch can see."""
    if device != "cuda":
        return
    import torch  # here: only --device cuda pays for importing torch before the run starts

    if not torch.cuda.is_available():
        build = "built without CUDA" if torch.version.cuda is None else "sees no CUDA device"
        raise UserError(f"--device cuda: torch {torch.__version__} {build} on this machine; use --device cpu (or auto)")


def check_gpus(gpus: list[str] | None, device: str) -> str | None:
    """``--gpus``: indices of GPUs this machine has; the warning to print when trials will not use them, else ``None``.

    Without CUDA, ``--device cuda`` is refused by :func:`check_device`; with ``auto`` the trials
    run on the CPU, which a run that asked for GPUs is warned of rather than refused (one
    command line serves a study's GPU and CPU machines alike).
    """
    if not gpus:
        return None
    if device == "cpu":
        return f"--gpus {','.join(gpus)} is ignored with --device cpu: trials run on the CPU"
    import torch  # here: only --gpus pays for importing torch before the run starts

    if not torch.cuda.is_available():
        return f"--gpus {','.join(gpus)}: torch sees no CUDA device on this machine, so trials run on the CPU"
    count = torch.cuda.device_count()
    missing = sorted({g for g in gpus if int(g) >= count}, key=int)
    if missing and "CUDA_VISIBLE_DEVICES" not in os.environ:  # with it set, indices are the user's own mapping
        raise UserError(f"--gpus {','.join(gpus)}: this machine has {count} GPUs (0..{count - 1}), no GPU {', '.join(missing)}; pass indices below {count}")
    return None


def check_study_name(name: str) -> None:
    if not name.strip():
        raise UserError("--study-name is empty; pass a name such as sst2-precision")
    if len(name) > MAX_STUDY_NAME_LENGTH:
        raise UserError(
            f"--study-name is {len(name)} characters long; the study table holds at most {MAX_STUDY_NAME_LENGTH}: pass a shorter name"
        )


def check_heartbeat(interval: int, grace_period: int) -> None:
    """A trial silent for ``grace_period`` seconds is taken for dead: that must outlast one missed beat.

    Beats come every ``interval`` seconds; one late or lost beat (a slow step, a database
    restart) leaves a gap of two intervals. A shorter grace period would have other workers
    fail and re-queue trials that are alive and training.
    """
    # Each beat is a timed wait: a longer one overflows it (the heartbeat thread died with a traceback mid-run).
    longest = int(threading.TIMEOUT_MAX)
    if interval > longest:
        raise UserError(f"--heartbeat-interval {interval} is longer than the longest wait this machine can time ({longest} s); pass a shorter one")
    if grace_period <= 2 * interval:
        raise UserError(
            f"--grace-period {grace_period} is not longer than two --heartbeat-interval {interval} ({2 * interval} s): "
            "a live trial missing one beat would be taken for dead, failed and re-queued by another worker; "
            f"pass --grace-period above {2 * interval} or a shorter --heartbeat-interval"
        )


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable_directory(path: str | Path, flag: str) -> None:
    """``path`` is a writable directory, or can be created as one (its nearest existing parent is writable)."""
    directory = Path(path).expanduser()
    existing = _nearest_existing(directory)
    if existing.exists() and not existing.is_dir():
        what = "is" if existing == directory else f"is under {existing}, which is"
        raise UserError(f"{flag} {directory} {what} a file, not a directory; pass a directory path")
    if not _can_create_in(existing):
        where = "" if existing == directory else f" (nor can it be created in {existing})"
        raise UserError(f"{flag} {directory} is not writable{where}; pass a writable directory")


def _can_create_in(directory: Path) -> bool:
    """An entry can be made in ``directory``: tried, not asked (os.access says yes to root for anything, /proc and /sys too)."""
    try:
        probe = tempfile.mkdtemp(prefix=".hpo-write-check-", dir=directory)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.rmdir(probe)
    return True
