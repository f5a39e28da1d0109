"""Which process of this machine a key names, unique across pid reuse, and whether that process has exited.

Used for a worker's trials (``hpo.study._liveness``: a trial whose worker here is gone is failed at
once) and for its scratch directories (``hpo.storage._scratch``: a dead worker's are removed).
Both act only on a sure "exited": /proc saying nothing of the pid, or another process under it.
"""

from __future__ import annotations

import os
from pathlib import Path


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot); ``None`` when no such process runs (gone, or a zombie).

    Raises ``OSError`` when /proc cannot tell (no permission, no file descriptors left): not an exit.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Fields 3 (state) and 22 (start time), counted after the ")" that ends the command name.
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]  # Z, X: exited, not yet reaped by its parent


def _machine() -> str | None:
    """``boot/pid-namespace``: where a pid means the same process as here."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")  # the namespace this pid is numbered in
    except OSError:
        return None
    return f"{boot}/{namespace}" if boot else None


def process_key(pid: int) -> str | None:
    """``boot/pid-namespace/pid/start-time`` of a live process, unique on this machine across pid reuse; ``None`` if unknown."""
    machine = _machine()
    try:
        started = _start_time(pid)
    except OSError:
        return None
    return f"{machine}/{pid}/{started}" if machine and started else None


def numbered_here(key: str) -> bool:
    """Whether ``key`` names a process of this machine's boot and this pid namespace (so that it can be checked from here)."""
    machine = _machine()
    return machine is not None and key.rsplit("/", 2)[0] == machine


def has_exited(key: str) -> bool:
    """Whether ``key``'s process was numbered here and surely no longer runs (its pid is free or names another process)."""
    try:
        pid = int(key.rsplit("/", 2)[1])
    except (IndexError, ValueError):
        return False  # not a key: nothing can be said
    if not numbered_here(key):
        return False
    try:
        started = _start_time(pid)
    except OSError:
        return False  # /proc cannot tell: leave it
    return started is None or key.rsplit("/", 1)[1] != started  # the machine and pid are the key's (checked above)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container's cpuset or ``taskset`` narrows)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
