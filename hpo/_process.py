"""Which process of this machine a key names, unique across pid reuse, and whether that process has exited.

Used for a worker's trials (``hpo.study._liveness``: a trial whose worker here is gone is failed at
once) and for its scratch directories (``hpo.storage._scratch``: a dead worker's are removed).
"""

from __future__ import annotations

import os
from pathlib import Path


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def process_key(pid: int) -> str | None:
    """``boot/pid-namespace/pid/start-time`` of a live process, unique on this machine across pid reuse; ``None`` if unknown."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")  # the namespace this pid is numbered in
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields 3 (state) and 22 (start time, in clock ticks since boot), counted after the ")" that ends the command name.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # exited, not yet reaped by its parent
        return None
    started = fields[19]
    return f"{boot}/{namespace}/{pid}/{started}" if boot else None


def numbered_here(key: str) -> bool:
    """Whether ``key`` names a process of this machine's boot and this pid namespace (so that it can be checked from here)."""
    mine = process_key(os.getpid())
    return mine is not None and key.rsplit("/", 2)[0] == mine.rsplit("/", 2)[0]


def has_exited(key: str) -> bool:
    """Whether ``key``'s process was numbered here and no longer runs (its pid is free or names another process)."""
    try:
        pid = int(key.rsplit("/", 2)[1])
    except (IndexError, ValueError):
        return False  # not a key: nothing can be said
    return numbered_here(key) and process_key(pid) != key
