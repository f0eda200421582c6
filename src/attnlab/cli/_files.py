"""The one way a command writes a file: checked before the work, never over a file without
``--force``, and atomic.

Every option that names an output file (``lab NAME --plot``, ``lab train-induction --save``,
``bench attention --json``, ``bench backward --json``) goes through here:

- ``check_target`` runs before any work (a lab or a benchmark may take minutes): the folder
  exists and is writable, the path is not a folder, and an existing file is refused unless
  ``--force``. It leaves nothing behind (its probe of the folder, a temporary file, is removed
  at once), so a run that fails later leaves no empty file.
- ``write_target`` writes the whole text to a temporary file in the same folder (a name
  ``mkstemp`` chose, never a predictable one a planted symlink could catch), then moves it
  into place in one step: a reader sees the old file or the new one, never half of one, and a
  failure (a full disk, Ctrl-C) removes the temporary file and leaves the old file as it was.
  Without ``--force`` the move is a hard link, which fails if a file appeared meanwhile.
"""

from __future__ import annotations

import os
from pathlib import Path

from attnlab._atomic import probe_folder, write_atomic
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
    try:  # what only a real write finds (/proc, a read-only mount, for root), before the work
        probe_folder(path)
    except OSError as exc:
        raise fail(f"{option}: cannot write {clip(str(path))} ({exc.strerror or exc})") from None


def write_target(option: str, path, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (``_atomic.write_atomic``), or fail in one line."""
    try:
        write_atomic(path, lambda out: out.write(text), force=force, text=True)
    except FileExistsError:
        raise fail(
            f"{option}: expected a new file, but {clip(str(path))} appeared while the command "
            "ran; add --force to replace it"
        ) from None
    except OSError as exc:
        raise fail(f"{option}: cannot write {clip(str(path))} ({exc.strerror or exc})") from None
