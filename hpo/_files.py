"""The text files the commands write (an export, a report, a verdict, a best trial's config): whole or not at all."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from hpo._errors import UserError


def write_whole(path: Path, text: str, what: str) -> None:
    """Write ``text`` to ``path`` through a file beside it moved into place: a full disk or a kill mid-write leaves
    ``path`` as it was (or absent), never half of it. An ``OSError`` is a :class:`UserError` naming ``what`` (``--out``)."""
    # "/" or "." has no file name to put a partial file beside (with_name raised ValueError): a directory, said so.
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial") if path.name else None
    try:
        if partial is None:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        with partial.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename makes it the file: a crash shows the old or the new
        os.replace(partial, path)
    except OSError as err:
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        raise UserError(f"cannot write {what} {path}: {err.strerror}; pick a writable path with room for it") from None
