"""The last step of an atomic write, shared by every writer of a whole file (the CLI's
``--plot``/``--json`` files and ``verify``'s plot page).

A writer puts the complete file beside its target under a temporary name, then calls
``move_into_place``: a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import os

__all__ = ["move_into_place"]


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
