"""Directories that turn read-only for real: a read-only tmpfs mount as root (root writes through
permissions), ``chmod 555`` otherwise."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


class ReadOnlyDirectory:
    """``path``, writable until :meth:`freeze`, read-only after it; undone on exit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mounted = False

    def __enter__(self) -> ReadOnlyDirectory:
        self.path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(self.path)], capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"as root, a read-only directory needs a tmpfs mount, which failed: {done.stderr.strip()}")
            self.mounted = True
        return self

    def freeze(self) -> None:
        if self.mounted:
            # A file open for writing in it (a worker's checkpoint upload) makes the remount busy (exit 32): retried
            # until the write is done, as a disk an admin remounts read-only between two writes.
            deadline = time.monotonic() + 10.0
            while (done := subprocess.run(["mount", "-o", "remount,ro", str(self.path)], capture_output=True, text=True)).returncode:
                if time.monotonic() > deadline:
                    raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
                time.sleep(0.02)
        else:
            self.path.chmod(0o555)
        assert not os.access(self.path, os.W_OK), f"{self.path} is still writable"

    def __exit__(self, *exc: object) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)
        else:
            self.path.chmod(0o755)


@contextlib.contextmanager
def read_only_directory(path: Path) -> Iterator[Path]:
    """``path`` as a read-only directory for the duration."""
    with ReadOnlyDirectory(path) as directory:
        directory.freeze()
        yield path
