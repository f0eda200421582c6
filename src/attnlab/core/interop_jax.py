"""Masks from and to the keyword arguments of ``jax.nn.dot_product_attention``.

Shape legend (JAX's letters, then attnlab's):
    B   batch       T   query length (attnlab's N)      S   key length (attnlab's M)
    N   heads (attnlab's h)                              H   head width (d_k)

JAX lays q out as (B, T, N, H); attnlab as (..., N, d_k) with heads as a leading axis, so the
attnlab form of a JAX call is q.transpose(0, 2, 1, 3): (B, h, T, d_k). JAX's masks broadcast to
(B, N, T, S), which is then attnlab's (B, h, N, M) table, batch first.

JAX's mask keywords and their attnlab specs:

    is_causal=True                      Causal()              (key j <= query i)
    local_window_size=(left, right)     keys i-left .. i+right; an int w means (w, w)
        (left, 0), or any with is_causal    SlidingWindow(left + 1)
        other windows                       the band's structure if a spec renders it
                                            (Causal / SlidingWindow bottom_right), else Dense
    key_value_seq_lengths=L             Padding(L)
    query_seq_lengths=L                 Dense (B, 1, T, 1): rows i >= L[b] see no key
    mask (bool, True = take part)       its structure, else Dense
    bias (added to the scores)          Dense (float)

Two differences in what is computed, not in the mask: JAX's softmax always runs in float32
(float64 inputs agree with attnlab to float32 accuracy only), and a query row with no allowed
key gets a uniform softmax in JAX (the mean of V), or zeros for rows past query_seq_lengths;
attnlab raises ``FullyMaskedRowError`` naming the row.
"""

from __future__ import annotations

import functools
import operator

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.core._structure import spec_of
from attnlab.core.interop import as_numpy, read_additive
from attnlab.core.masks import Causal, Dense, Mask, Padding, SlidingWindow, as_mask
from attnlab.errors import AttnlabError, ShapeError

__all__ = ["from_jax", "to_jax"]


def _window(local_window_size) -> tuple[int, int]:
    w = local_window_size
    pair = (w, w) if isinstance(w, int | np.integer) else w
    ok = isinstance(pair, tuple | list) and len(pair) == 2
    if not ok or not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in pair):
        raise AttnlabError(
            f"expected local_window_size to be an int or a (left, right) pair of ints, but got "
            f"{local_window_size!r} instead"
        )
    return int(pair[0]), int(pair[1])


def _lengths(name: str, x) -> np.ndarray:
    arr = as_numpy(name, x)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise AttnlabError(
            f"expected {name} to be a 1-D integer array of shape (B,), but got dtype "
            f"{arr.dtype} and shape {arr.shape} instead"
        )
    return arr.astype(np.int64)


def _size(name: str, given, from_mask) -> int:
    size = given if given is not None else from_mask
    if size is None:
        raise ShapeError(
            f"expected {name} (the {'query' if name == 'n' else 'key'} count) to build this "
            f"mask as a table, as no mask spec expresses it, but got {name}=None instead"
        )
    return int(size)


def from_jax(
    mask=None,
    *,
    bias=None,
    query_seq_lengths=None,
    key_value_seq_lengths=None,
    local_window_size=None,
    is_causal=False,
    n=None,
    m=None,
) -> Mask | None:
    """The attnlab mask for the mask keywords of ``jax.nn.dot_product_attention``.

    Args:
        mask: bool, broadcastable to (B, N, T, S); True = take part in attention.
        bias: float, broadcastable to (B, N, T, S), added to the scores.
        query_seq_lengths, key_value_seq_lengths: (B,) integers.
        local_window_size: int or (left, right): query i sees keys i-left .. i+right.
        is_causal: key j <= query i.
        n, m: T and S, needed only where the result must be a table (a window no spec
            expresses, or query_seq_lengths) and ``mask`` does not give them.

    Returns:
        a spec for q of shape (B, h, T, d_k) (see the module docstring), or None for no mask.

    >>> from attnlab.masks import explain
    >>> from_jax(is_causal=True, local_window_size=(2, 2))  # causal clips the right side
    SlidingWindow(size=3)
    >>> from_jax(local_window_size=(3, 0), key_value_seq_lengths=np.array([5, 3], np.int32))
    SlidingWindow(size=4) + Padding(lengths=[5, 3])
    >>> print(explain(from_jax(local_window_size=(1, 1), n=3, m=3), 3))
    Dense(bool, shape=(3, 3)) on N=3 queries x M=3 keys.
      ·  may attend
      d  blocked by Dense(bool, shape=(3, 3)): an explicit table, False blocks
      key      0 1 2
      query 0  · · d  sees keys 0-1
      query 1  · · ·  sees keys 0-2
      query 2  d · ·  sees keys 1-2
    """
    if not isinstance(is_causal, bool | np.bool_):
        raise AttnlabError(f"expected is_causal to be a bool, but got {is_causal!r} instead")
    parts: list[Mask] = []
    table_n = table_m = None
    if mask is not None:
        arr = _table(
            "mask",
            mask,
            "b",
            "a bool array (True = take part) of 2 to 4 axes, as JAX requires (additive masks "
            "go to bias)",
        )
        table_n, table_m = (s if s > 1 else None for s in arr.shape[-2:])
        arr = arr.reshape((1,) * (4 - arr.ndim) + arr.shape)  # (B|1, N|1, T|1, S|1)
        parts += spec_of(arr, batch_first=True).parts()
    if local_window_size is not None:
        left, right = _window(local_window_size)
        right = min(right, 0) if is_causal else right  # causal and window: both apply
        if right == 0 and left >= 0:
            parts.append(SlidingWindow(min(left + 1, 2**62)))
        else:
            n_, m_ = _size("n", n, table_n), _size("m", m, table_m)
            i, j = np.arange(n_)[:, None], np.arange(m_)[None, :]
            parts += spec_of((j >= i - left) & (j <= i + right), batch_first=False).parts()
    elif is_causal:
        parts.append(Causal())
    if key_value_seq_lengths is not None:
        parts.append(Padding(_lengths("key_value_seq_lengths", key_value_seq_lengths)))
    if query_seq_lengths is not None:
        q_len = _lengths("query_seq_lengths", query_seq_lengths)
        rows = np.arange(_size("n", n, table_n))[None, :] < q_len[:, None]  # (B, T)
        parts.append(Dense(rows[:, None, :, None]))  # (B, 1, T, 1)
    if bias is not None:
        parts.append(Dense(_table("bias", bias, "f", "a float array of 2 to 4 axes")))
    return functools.reduce(operator.add, parts) if parts else None


def _table(name: str, value, kind: str, wanted: str) -> np.ndarray:
    """``value`` as a numpy array of dtype kind ``kind`` and 2 to 4 axes, JAX's (B, N, T, S)
    with leading axes optional; else an error that says it should be ``wanted``."""
    arr = as_numpy(name, value)
    if arr.dtype.kind != kind or not 2 <= arr.ndim <= 4:
        raise AttnlabError(
            f"expected {name} to be {wanted}, but got dtype {arr.dtype} and shape "
            f"{arr.shape} instead"
        )
    return arr


def _jax_band(part: Mask, n: int, m: int) -> tuple[int, int]:
    """(left, right) of a Causal / SlidingWindow part on an N x M table, JAX's window."""
    off = 0 if part.align == "top_left" else m - n
    left, right = part._reach()  # inf for a side without a limit
    return int(min(left, n + m)) - off, int(min(right, n + m)) + off


def to_jax(mask, n: int, m: int | None = None) -> dict:
    """The keyword arguments of ``jax.nn.dot_product_attention`` that express ``mask``.

    Args:
        mask: a mask spec, or an array as ``attention`` accepts, for attnlab's (B, h, T, d_k)
            form of JAX's (B, T, N, H) inputs.
        n: query count T.   m: key count S (defaults to T).

    Returns:
        a dict with some of ``is_causal``, ``local_window_size``, ``key_value_seq_lengths``
        (int32, as JAX requires), ``mask`` (bool, 4-D) and ``bias`` (float, 4-D). Bands meet
        in one window (a window is an interval, and intervals intersect as one); a band JAX
        cannot write with a window of non-negative sides becomes part of ``mask``.

    >>> from attnlab.masks import Causal, Padding, SlidingWindow
    >>> to_jax(Causal() + Padding([3, 2]), 3)
    {'is_causal': True, 'key_value_seq_lengths': array([3, 2], dtype=int32)}
    >>> to_jax(SlidingWindow(2), 4)
    {'local_window_size': (1, 0)}
    >>> to_jax(Causal(align="bottom_right"), 2, 5)
    {'local_window_size': (1, 3)}
    """
    mask = as_mask(mask)
    if mask is None:
        return {}
    m = n if m is None else m
    n, m = positive_int("n", n, ShapeError), positive_int("m", m, ShapeError)
    left, right = n - 1, m - 1  # the widest window: no restriction
    lengths, table, bias = None, np.ones((1, 1, n, m), dtype=bool), None
    for part in mask.parts():
        if isinstance(part, Causal | SlidingWindow):
            l, r = _jax_band(part, n, m)
            left, right = min(left, l), min(right, r)
        elif isinstance(part, Padding):
            own = np.minimum(np.asarray(part.lengths), m)  # longer than M: all M keys
            lengths = own if lengths is None else np.minimum(lengths, own)
        elif isinstance(part, Dense) and not part.boolean:
            part.block((0, 1), (0, 1), n, m, 2)  # refuses a table that does not fit N x M
            allowed = read_additive("mask", part.array)
            if allowed is None:
                blocked = part.array <= np.finfo(part.array.dtype).min
                table = table & _four(~blocked)
                finite = np.where(blocked, 0.0, part.array).astype(part.array.dtype)
                bias = _four(finite) if bias is None else bias + _four(finite)
            else:
                table = table & _four(allowed)
        else:
            table = table & _four(part.block((0, n), (0, m), n, m, 2))
    out: dict = {}
    if left < 0 or right < 0:  # a window with a negative side is no documented JAX window
        i, j = np.arange(n)[:, None], np.arange(m)[None, :]  # (N, 1), (1, M)
        table = table & (j >= i - left) & (j <= i + right)  # (1, 1, N, M)
    elif right == 0 and left == n - 1:
        out["is_causal"] = True
    elif (left, right) != (n - 1, m - 1):
        out["local_window_size"] = (int(left), int(right))
    if lengths is not None:
        out["key_value_seq_lengths"] = lengths.astype(np.int32)
    if not table.all():
        out["mask"] = np.ascontiguousarray(table)
    if bias is not None:
        out["bias"] = np.ascontiguousarray(bias)
    return out


def _four(a: np.ndarray) -> np.ndarray:
    """``a`` (..., T, S) with leading axes of size 1 up to JAX's four, (B, N, T, S)."""
    if a.ndim > 4:
        raise ShapeError(
            f"expected a mask table of at most 4 axes, (B, N, T, S), for JAX, but got shape "
            f"{a.shape} instead"
        )
    return a.reshape((1,) * (4 - a.ndim) + a.shape)
