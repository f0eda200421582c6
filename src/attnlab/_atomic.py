"""Whole-file writes that are atomic and never follow a planted name: every writer of a file
(the CLI's ``--plot``, ``--json`` and ``--save`` files, ``verify``'s plot page, a saved model)
goes through here.

``write_atomic`` puts the complete file beside its target under a name ``tempfile.mkstemp``
chose (random, created with O_EXCL, mode 0600: a symlink or file planted in the folder under a
predictable name is never opened), syncs it, then moves it into place in one step: a reader
sees the old file or the new one, never half of one. ``probe_folder`` is the same first step,
undone at once, for a check before the work: a folder that only a real write can refuse
(``/proc``, a read-only mount, for root) fails there rather than after minutes of work.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["move_into_place", "probe_folder", "write_atomic"]


def move_into_place(temp, path, *, force: bool) -> None:
    """Move the finished file ``temp`` to ``path`` in one step.

    With ``force`` an existing ``path`` is replaced. Without it the move is a hard link, which
    raises FileExistsError, rather than replace, if a file appeared at ``path`` meanwhile (the
    caller's check that it was free happened before the work); the caller removes ``temp``.
    """
    if force:
        os.replace(temp, path)
    else:
        os.link(temp, path)


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def probe_folder(path) -> None:
    """Create and remove a temporary file beside ``path``: raises OSError where a write would."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=_folder(path))
    os.close(fd)
    os.unlink(temp)


def write_atomic(path, fill: Callable[[IO], None], *, force: bool, text: bool = False) -> None:
    """Write ``path`` through ``fill(file)`` (a binary file, or UTF-8 text with ``text``).

    Raises FileExistsError when ``path`` exists and not ``force`` (also when it appeared while
    the file was written), OSError when the folder refuses; nothing is left behind either way:
    the temporary file is removed and an old ``path`` is as it was.
    """
    path = Path(path)
    temp = None
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=_folder(path))
        with os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o666 & ~_umask())  # mkstemp makes 0600; a user's file is 0666 - umask
        move_into_place(temp, path, force=force)
    finally:
        if temp is not None and os.path.lexists(temp):
            os.unlink(temp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
