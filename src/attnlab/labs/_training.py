"""What the three training labs share: their random streams, the training loop, head scores.

Randomness: the model's initial weights come from its own ``seed`` (``TinyTransformer``);
training batches from ``rng_for(seed, lab, TRAIN)`` and the fresh sequences a lab measures on
from ``rng_for(seed, lab, FRESH)``, so the measurement never sees a training sequence's stream
and a longer run keeps the same first batches.

Speed: a training step is a few dozen small matrix products (R = B·N rows of width d_model).
OpenBLAS threads such products over every core; on a busy two-core machine that made a
(2048 × 64)ᵀ(2048 × 64) product 200 ms instead of 0.3 ms (measured while the machine ran
other work), so the loop pins OpenBLAS to one thread, as attnlab's blockwise pool does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.kernels._threads import one_blas_thread
from attnlab.labs._common import Progress
from attnlab.transformer import Adam, TinyTransformer

__all__ = ["FRESH", "INDUCTION", "POSITIONS", "SCALING", "TRAIN", "Curve", "checked", "fit",
           "one_thread", "watching"]  # fmt: skip

# Stream tags of the training labs, far from _common's 1..7 so that new labs there never
# collide with these.
INDUCTION, SCALING, POSITIONS = 101, 102, 103
TRAIN, FRESH = 1, 2

#: batch(rng) -> (tokens (B, N), targets (B, N)) for one training step.
Batches = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]


@contextmanager
def one_thread():
    """OpenBLAS on one thread inside the block (see the module's docstring)."""
    with one_blas_thread():
        yield


def checked(spec, **values) -> tuple:
    """``spec.check(**values)``, then each float parameter within its spec's closed bounds
    (``Param.check`` leaves real numbers alone; each of these labs' real
    parameters has both bounds): every bound of a training lab is written once,
    in its spec. Returns the checked values in the order given."""
    out = spec.check(**values)
    result = []
    for (name, _), value in zip(values.items(), out, strict=True):
        p = spec.param(name)
        if p.kind is float and p.low is not None and p.high is not None:
            value = _real(name, value, *p.bounds())
        result.append(value)
    return tuple(result)


def _real(name: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise AttnlabError(f"expected {name} to be a number, but got {value!r} instead")
    if not low <= value <= high:  # NaN fails too
        raise AttnlabError(f"expected {name} from {low:g} to {high:g}, but got {value!r} instead")
    return float(value)


#: watcher(done, total, loss, model): called after every training step of this thread's labs.
Watcher = Callable[[int, int, float, TinyTransformer], None]
_watch = threading.local()  # .watcher: this thread's, if any


@contextmanager
def watching(watcher: Watcher):
    """Call ``watcher`` after each step of every ``fit`` this thread runs inside the block.

    A front end follows a training run with it (the explorer's jobs, ``web/runs.py``): the
    watcher sees the step counter, the step's loss and the model, and may raise to stop the
    run there (the exception leaves ``fit`` and the lab unchanged). Thread-local, so labs run
    by other threads are not watched.
    """
    previous = getattr(_watch, "watcher", None)
    _watch.watcher = watcher
    try:
        yield
    finally:
        _watch.watcher = previous


class Curve:
    """Loss per step, and the wall seconds the steps took."""

    def __init__(self):
        self.losses: list[float] = []
        self.seconds = 0.0


def fit(model: TinyTransformer, batch: Batches, rng: np.random.Generator, *, steps: int,
        lr: float, progress: Progress | None = None, done: int = 0, total: int | None = None,
        each: Callable | None = None) -> Curve:  # fmt: skip
    """Train ``model`` with Adam for ``steps`` steps of ``batch(rng)``; its arrays change.

    The learning rate decays from ``lr`` to 0 along a half cosine: a large rate early gets
    the model off its first plateau sooner, and the small late ones settle it (measured on the
    induction task: a constant 1e-2 left the accuracy jumping about 0.93, a constant 3e-3 took
    twice the steps to leave the plateau).

    ``each(step, model, tokens, targets)``, when given, runs before each step's update (the
    scaling lab records its saturation numbers there). progress(done + step, total) after
    each step, so several runs can share one progress bar; then the thread's ``watching``
    watcher, if any, with the loss and the model too.
    """
    curve, opt = Curve(), Adam(model.params, lr=lr)
    watcher = getattr(_watch, "watcher", None)
    start = time.perf_counter()
    with one_thread():
        for step in range(steps):
            tokens, targets = batch(rng)
            if each is not None:
                loss, grads = each(step, model, tokens, targets)
            else:
                loss, grads = model.loss_and_grads(tokens, targets)
            opt.lr = 0.5 * lr * (1 + np.cos(np.pi * step / steps))
            opt.step(grads)
            curve.losses.append(loss)
            if progress is not None:
                progress(done + step + 1, total or steps)
            if watcher is not None:
                watcher(done + step + 1, total or steps, loss, model)
    curve.seconds = time.perf_counter() - start
    return curve


def smoothed(losses: list[float], window: int = 10) -> np.ndarray:
    """The mean of each step's last ``window`` losses (fewer at the start)."""
    x = np.cumsum(np.asarray(losses, dtype=float))
    out = x.copy()
    out[window:] = x[window:] - x[:-window]
    return out / np.minimum(np.arange(1, len(x) + 1), window)
