"""The one way a command writes a file: checked before the work, never over a file without
``--force``, and atomic.

Every option that names an output file (``lab NAME --plot``, ``bench attention --json``,
``bench backward --json``) goes through here:

- ``check_target`` runs before any work (a lab or a benchmark may take minutes): the folder
  exists and is writable, the path is not a folder, and an existing file is refused unless
  ``--force``. It creates nothing, so a run that fails later leaves no empty file behind.
- ``write_target`` writes the whole text to a temporary file in the same folder, then moves it
  into place in one step: a reader sees the old file or the new one, never half of one, and a
  failure (a full disk, Ctrl-C) removes the temporary file and leaves the old file as it was.
  Without ``--force`` the move is a hard link, which fails if a file appeared meanwhile.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from attnlab._atomic import move_into_place
from attnlab.cli._app import clip, fail

__all__ = ["check_target", "write_target"]


def check_target(option: str, path, force: bool = False) -> None:
    """Fail, before any work, when ``path`` cannot be written or would be overwritten."""
    if path is None:
        return
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not folder.is_dir():
        raise fail(f"{option}: expected a file in an existing folder, but got {clip(str(path))}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise fail(f"{option}: cannot write in the folder of {clip(str(path))} (permission denied)")
    if (path.exists() or path.is_symlink()) and not force:
        raise fail(
            f"{option}: expected a new file, but {clip(str(path))} already exists; "
            "add --force to replace it"
        )


def write_target(option: str, path, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + rename), or fail in one line."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o666 & ~_umask())  # mkstemp makes 0600; a user's file is 0666 - umask
        move_into_place(temp, path, force=force)
    except FileExistsError:
        raise fail(
            f"{option}: expected a new file, but {clip(str(path))} appeared while the command "
            "ran; add --force to replace it"
        ) from None
    except OSError as exc:
        raise fail(f"{option}: cannot write {clip(str(path))} ({exc.strerror or exc})") from None
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
