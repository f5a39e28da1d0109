"""The files the commands write (an export, a report and its plots, a verdict, a best trial's config): whole or not at all."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from hpo._errors import UserError


def write_whole(path: Path, content: str | bytes, what: str) -> None:
    """Write ``content`` (text as UTF-8) to ``path`` through a file beside it moved into place: a full disk or a kill
    mid-write leaves ``path`` as it was (or absent), never half of it. A symlink is followed (its target is written, the
    link kept); a target that is no regular file (a FIFO, a device) is written into as it is,
    never replaced. An ``OSError`` is a :class:`UserError` naming ``what`` (``--out``)."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    partial = None
    try:
        if _is_special(path):  # a reader waits on it, or it is no file at all: there is nothing to replace
            with path.open("wb") as handle:
                handle.write(data)
            return
        # The file a link names is the one to replace: renaming onto the link would swap it for a copy, the target left stale.
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        if target.is_symlink():  # realpath stopped on a loop of links
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        # "/" or "." has no file name to put a partial file beside (with_name raised ValueError): a directory, said so.
        if not target.name:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        with partial.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the rename makes it the file: a crash shows the old or the new
        os.replace(partial, target)
    except OSError as err:
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        raise UserError(f"cannot write {what} {path}: {err.strerror}; pick a writable path with room for it") from None


def _is_special(path: Path) -> bool:
    """``path`` (a link followed) exists and is neither a regular file nor a directory (a directory stays an error: EISDIR)."""
    try:
        mode = path.stat().st_mode
    except OSError:  # absent (or unreadable): the whole-file path creates it, or says why it cannot
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def path_component(name: str) -> str:
    """``name`` (a study's) as one file name, readable as given: ``/``, ``\\`` and NUL become ``_``, and so do leading dots,
    so that no name makes a nested directory, climbs out of the working directory (``x/../../tmp``) or hides its file."""
    safe = name.translate({ord("/"): "_", ord("\\"): "_", 0: "_"})
    kept = safe.lstrip(".")
    return "_" * (len(safe) - len(kept)) + kept or "_"
