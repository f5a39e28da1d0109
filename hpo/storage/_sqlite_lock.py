"""One lock per SQLite file among this machine's processes: what SQLite's own locking leaves unguarded.

Python's sqlite3 driver runs a SELECT outside any transaction, so Optuna's read-then-write steps
(taking a WAITING trial, a check-then-enqueue) are not atomic across processes on SQLite as they
are on PostgreSQL (``SELECT ... FOR UPDATE``, advisory locks).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

_held = threading.local()  # the lock keys this thread holds: a nested take of the same lock goes through


@contextlib.contextmanager
def sqlite_file_lock(database: str | None) -> Iterator[None]:
    """An exclusive lock among this machine's processes on the SQLite file ``database`` (none for ``:memory:``).

    Re-entrant within a thread. The lock file lives in the temp directory, named by the
    database's absolute path: not beside the database (read-only commands leave nothing there),
    and not the database itself (closing another descriptor of it would drop SQLite's own POSIX locks).
    """
    if not database or database == ":memory:":
        yield
        return
    key = hashlib.sha256(str(Path(database).expanduser().resolve()).encode()).hexdigest()[:24]
    held: set[str] = _held.__dict__.setdefault("keys", set())
    if key in held:  # flock on a second descriptor of the same file would wait for ourselves
        yield
        return
    # Per user: a directory another user created in the shared temp directory is not ours to write.
    lock_dir = Path(tempfile.gettempdir()) / f"precision-hpo-locks-{os.getuid()}"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    with (lock_dir / f"{key}.lock").open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
            fcntl.flock(lock_file, fcntl.LOCK_UN)
