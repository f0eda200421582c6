"""A measuring child that exits with the process that started it.

``run_isolated`` runs each benchmark job in a fresh Python process. Killed (SIGKILL, SIGTERM)
the parent leaves that child running its remaining rounds at full CPU, since nothing tells
it. Two ways, both set up before the job imports anything heavy:

    PR_SET_PDEATHSIG    Linux's prctl: the kernel sends the child SIGKILL when its parent
                        dies (through ctypes; nothing to install)
    a watchdog thread   elsewhere, or where prctl is refused: every ``POLL_S`` it compares
                        ``os.getppid()`` with the parent's pid the job was given and ends the
                        process when they differ (the child was re-parented)

``main(module)`` is the child's entry: ``python -c ... PARENT_PID MODULE JSON`` (see
``command``), which arms both and then runs ``MODULE`` as ``__main__`` with the JSON argument.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import runpy
import signal
import sys
import threading
import time

__all__ = ["POLL_S", "command", "exit_with_parent", "main"]

POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


def _pdeathsig() -> bool:
    """Ask the kernel for SIGKILL when the parent dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(1)  # no cleanup to wait for: the one reader of this process's output is gone


def exit_with_parent(parent: int) -> None:
    """Arm both guards for ``parent``'s pid, and exit now if it is already gone."""
    _pdeathsig()
    if os.getppid() != parent:  # it died before the guard was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="parent-watch").start()


def command(module: str, job_json: str) -> list[str]:
    """The child's argv: this interpreter running ``module`` under both guards."""
    code = "import sys; from attnlab.bench._orphan import main; main()"
    return [sys.executable, "-c", code, str(os.getpid()), module, job_json]


def main() -> None:
    """The child side of ``command``: guard, then run the module with its JSON argument."""
    parent, module, job = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    exit_with_parent(parent)
    sys.argv = [module, job]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
