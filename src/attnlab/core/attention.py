"""Scaled dot-product attention, softmax(Q Kᵀ · scale + mask) V, exactly as §6.2 writes it.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows (in self-attention M = N)
    d_k  query and key width   d_v  value width

One private function, ``_attend``, computes every table: ``attention`` keeps the output,
``trace_attention`` keeps every intermediate table, multi-head attention calls it with the heads
as a batch axis, and the blockwise path is tested equal to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from attnlab.core.masks import Causal, Mask, as_mask, raise_fully_masked
from attnlab.errors import AttnlabError, NonFiniteInputError, ShapeError

__all__ = ["AttentionTrace", "attention", "scaled_dot_product_attention", "trace_attention"]


@dataclass(frozen=True)
class Inputs:
    """Validated arguments: arrays in the compute dtype, a Mask (or None), and the sizes."""

    q: np.ndarray  # (..., N, d_k)
    k: np.ndarray  # (..., M, d_k)
    v: np.ndarray  # (..., M, d_v)
    mask: Mask | None
    scale: float
    lead: tuple[int, ...]  # the broadcast leading shape
    n: int
    m: int
    check_finite: bool = True  # also refuse scores that overflow to inf


def _as_real(name: str, x) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except ValueError as exc:  # ragged nested lists
        raise ShapeError(f"expected {name} to be a rectangular array, but got {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise AttnlabError(
            f"expected {name} to hold real numbers, but got dtype {arr.dtype} instead"
        )
    if arr.ndim < 2:
        raise ShapeError(
            f"expected {name} to have shape (..., rows, width), but got {name}.shape={arr.shape} instead"
        )
    return arr


def _compute_dtype(*arrays: np.ndarray) -> np.dtype:
    dtype = np.result_type(*arrays)
    if dtype.kind in "biu" or dtype.itemsize > 8:
        return np.dtype(np.float64)
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def _check_finite(name: str, arr: np.ndarray) -> None:
    # A NaN or inf anywhere makes the sum NaN or inf: one quick pass (no bool table) clears the
    # common case; only a non-finite sum, which large finite values can also reach by
    # overflowing, needs the entry-by-entry look. Not np.dot, though faster: OpenBLAS would run
    # it on its own threads, which then spin for ~0.1 s and steal the cores the blockwise pool
    # is about to use.
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(arr)):
            return
    bad = ~np.isfinite(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise NonFiniteInputError(
            f"expected finite values in {name}, but got {arr[where]} at index {where} "
            f"({int(bad.sum())} non-finite entries); pass check_finite=False to skip this check"
        )


def validate(q, k, v, mask=None, *, scale=None, check_finite=True) -> Inputs:
    """Check shapes, dtypes, values, scale and mask once, at the public boundary."""
    q, k, v = _as_real("q", q), _as_real("k", k), _as_real("v", v)
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(
            f"expected q and k to share d_k (their last axis), "
            f"but got q.shape={q.shape} and k.shape={k.shape} instead"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            f"expected k and v to have the same number of rows M (one value per key), "
            f"but got k.shape={k.shape} and v.shape={v.shape} instead"
        )
    if k.shape[-2] == 0:
        raise ShapeError(f"expected at least one key, but got k.shape={k.shape}")
    if q.shape[-2] == 0:
        raise ShapeError(f"expected at least one query row, but got q.shape={q.shape}")
    if q.shape[-1] == 0:
        raise ShapeError(f"expected d_k >= 1, but got q.shape={q.shape} and k.shape={k.shape}")
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ShapeError(
            f"expected the leading (batch) axes of q, k and v to broadcast, but got "
            f"q.shape={q.shape}, k.shape={k.shape} and v.shape={v.shape} instead"
        ) from None
    dtype = _compute_dtype(q, k, v)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    if check_finite:
        for name, arr in (("q", q), ("k", k), ("v", v)):
            _check_finite(name, arr)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])  # §6.3: keeps Var(score) = 1 at any d_k
    else:
        try:
            scale = float(scale)
        except (TypeError, ValueError):
            raise AttnlabError(
                f"expected scale to be a number, but got {scale!r} instead"
            ) from None
        if not math.isfinite(scale):
            raise AttnlabError(f"expected a finite scale, but got {scale!r} instead")
    n, m = q.shape[-2], k.shape[-2]
    mask = as_mask(mask)
    if mask is not None:
        _check_mask_shape(mask, n, m, lead)
    return Inputs(q, k, v, mask, scale, tuple(lead), n, m, check_finite)


def validate_later(q, k, v, mask=None, *, scale=None, check_finite=True):
    """``validate`` with the finite-input check handed back as a function, to run when (and
    where) the caller likes: the blockwise path runs it on its thread pool beside the first
    tiles. Errors stay those of ``validate``, in its order: when another check fails, the
    finite check runs first, as ``validate`` would have.

    Returns:
        (Inputs, a function raising NonFiniteInputError, or None when check_finite is False).
    """
    try:
        x = validate(q, k, v, mask, scale=scale, check_finite=False)
    except AttnlabError:
        if check_finite:
            validate(q, k, v, mask, scale=scale)  # raises the error validate raises first
        raise
    if not check_finite:
        return x, None
    x = replace(x, check_finite=True)  # the kernels still refuse scores that overflow

    def finite() -> None:
        for name, arr in (("q", x.q), ("k", x.k), ("v", x.v)):
            _check_finite(name, arr)

    return x, finite


def _check_mask_shape(mask: Mask, n: int, m: int, lead: tuple[int, ...]) -> None:
    table = lead + (n, m)
    try:
        shape = mask._shape(n, m, len(lead))
    except ShapeError:
        raise  # a part's own message (e.g. Padding needs a batch axis) says what is wrong
    except ValueError:
        raise ShapeError(
            f"expected the parts of {mask!r} to broadcast together over the batch axes, "
            f"but they do not (score table (..., N, M) = {table})"
        ) from None
    try:
        fits = np.broadcast_shapes(table, shape) == table
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(
            f"expected the mask to broadcast to the score table (..., N, M) = {table}, "
            f"but got {mask!r} of shape {shape} instead"
        )


def apply_mask(scores: np.ndarray, mask: Mask, rows, cols, n: int, m: int, lead_ndim: int) -> None:
    """Add ``mask`` to a tile of scaled scores in place; masks combine by adding (§6.4)."""
    for part in mask.parts():
        if part.boolean:
            np.copyto(scores, -np.inf, where=~part._block(rows, cols, n, m, lead_ndim))
        else:
            scores += part._bias(rows, cols, n, m, lead_ndim)


def _attend(x: Inputs, *, want: str = "output", empty_rows: str = "raise", threads: int = 1):
    """The one implementation: scores -> scaled -> masked -> weights -> output.

    want: "output" | "weights" (output and weights) | "trace" (a copy of every table).
    empty_rows: "raise" (FullyMaskedRowError) or "zero" (output 0 there, as PyTorch does).
    threads: bands of rows computed at once (numpy's matmul and ufuncs release the GIL).

    Rows are independent, so the table is computed a band of rows at a time, each step in
    place: a band stays in cache through its five passes instead of the whole table streaming
    from memory five times. When only the output is wanted, each band goes all the way to its
    output rows and the N x M table is never allocated (a fresh 128 MiB table costs more in
    page faults than the q kᵀ matmul that fills it); the weights and the trace keep it whole.
    """
    n, m = x.n, x.m
    lead = table_lead(x)
    row_max = np.empty(lead + (n, 1), x.q.dtype)  # (..., N, 1)
    total = np.empty_like(row_max)  # (..., N, 1)
    kT = np.swapaxes(x.k, -1, -2)  # (..., d_k, M), a view
    risky = may_overflow(x)

    def scores_of(rows) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked at the max
            s = x.q[..., rows[0] : rows[1], :] @ kT  # (..., rows, M)
        if s.shape[:-2] != lead:  # the mask varies along an axis only v (or it) carries
            s = np.array(np.broadcast_to(s, lead + s.shape[-2:]))  # (..., rows, M)
        return s

    def softmax_rows(s: np.ndarray, rows) -> None:  # s: (..., rows, M), in place
        with np.errstate(over="ignore"):  # overflow is checked just below
            s *= s.dtype.type(x.scale)
        if risky:
            check_overflow(x, s, rows)
        if want == "trace":
            tables["scaled"] = s.copy()
        if x.mask is not None:
            apply_mask(s, x.mask, rows, (0, m), n, m, s.ndim - 2)
        if want == "trace":
            tables["masked"] = s.copy()
        # Safe softmax (see core/softmax.py), fused in place: shift by the row max and
        # exponentiate; a row with no allowed key is shifted by 0 (all its weights are 0).
        top = np.max(s, axis=-1, keepdims=True, out=row_max[..., rows[0] : rows[1], :])
        top[np.isneginf(top)] = 0.0
        s -= top
        np.exp(s, out=s)  # now the unnormalised weights
        np.sum(s, axis=-1, keepdims=True, out=total[..., rows[0] : rows[1], :])

    if want == "output":
        out = np.empty(np.broadcast_shapes(lead, x.v.shape[:-2]) + (n, x.v.shape[-1]), x.q.dtype)

        def band_rows(r0: int) -> None:
            rows = (r0, min(n, r0 + band))
            s = scores_of(rows)  # (..., band, M)
            for a in range(0, rows[1] - rows[0], sub):  # softmax in cache-sized pieces
                b = min(rows[1] - rows[0], a + sub)
                softmax_rows(s[..., a:b, :], (rows[0] + a, rows[0] + b))
            part = s @ x.v  # (..., band, d_v)
            # Divide the small output, not the table; rows with no key: 0, not 0/0.
            t = total[..., rows[0] : rows[1], :]
            part /= np.where(t == 0.0, 1.0, t).astype(part.dtype, copy=False)
            out[..., rows[0] : rows[1], :] = part

        row_bytes = math.prod(lead) * m * x.q.dtype.itemsize
        band = max(1, _OUT_BAND_BYTES // row_bytes)
        sub = max(1, _BAND_BYTES // row_bytes)
        _each(band_rows, range(0, n, band), threads, row_max.size * m * x.q.dtype.itemsize)
        _check_empty(x, total, empty_rows)
        return out

    tables = {}
    scores = scores_of((0, n))  # (..., N, M)
    if want == "trace":
        tables["scores"] = scores.copy()
        softmax_rows(scores, (0, n))  # the trace keeps every table: one band
    else:
        band = max(1, _BAND_BYTES // (math.prod(lead) * m * scores.dtype.itemsize))
        starts = range(0, n, band)
        _each(
            lambda r0: softmax_rows(scores[..., r0 : r0 + band, :], (r0, min(n, r0 + band))),
            starts,
            threads,
            scores.nbytes,
        )
    _check_empty(x, total, empty_rows)
    total[total == 0.0] = 1.0  # rows with no allowed key are all zeros: 0, not 0/0
    scores /= total  # (..., N, M) weights, rows sum to 1
    out = scores @ x.v  # (..., N, d_v)
    if want == "weights":
        return out, scores
    return out, scores, tables


def may_overflow(x: Inputs) -> bool:
    """Whether q·kᵀ·scale could overflow: a cheap bound, max|q|·max|k|·d_k·|scale|.

    Finite q and k can still give scores of ±inf (or -inf where inf - inf cancels inside a
    dot product, which would pass for a masked key). The bound costs one pass over q and k;
    only when it fails does each table of scores get checked entry by entry.
    """
    if not x.check_finite:
        return False
    with np.errstate(over="ignore"):
        bound = np.abs(x.q).max() * np.abs(x.k).max() * x.q.shape[-1] * abs(x.scale)
    return not bound < np.finfo(x.q.dtype).max


def check_overflow(x: Inputs, scaled: np.ndarray, rows) -> None:
    """Refuse scaled scores (..., rows, M) that overflowed: finite inputs, non-finite scores."""
    bad = ~np.isfinite(scaled)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        row = where[:-2] + (where[-2] + rows[0],)
        raise NonFiniteInputError(
            f"expected finite scores, but q·kᵀ·scale overflowed to {scaled[where]} in query "
            f"row {row}, key {where[-1]} (q and k are finite, but {x.q.dtype} tops out near "
            f"{np.finfo(x.q.dtype).max:.3g}); rescale q or k"
        )


def _each(fn, starts, threads: int, size: int) -> None:
    """fn(start) for each band, on the thread pool when there is enough work to share."""
    if threads > 1 and len(starts) > 1 and size >= _THREADED_BYTES:
        from attnlab.core._threads import on_threads

        on_threads(fn, starts, threads)
    else:
        for r0 in starts:
            fn(r0)


def _check_empty(x: Inputs, total: np.ndarray, empty_rows: str) -> None:
    empty = total == 0.0  # (..., N, 1): rows with no allowed key
    if empty_rows == "raise" and empty.any():
        _raise_empty(x, np.argwhere(empty[..., 0]))


_BAND_BYTES = 2**20  # rows per band of the softmax: about 1 MiB of scores (half the L2)
_OUT_BAND_BYTES = (
    2**24
)  # output-only bands: 16 MiB of scores (measured best of 2-32 MiB at N = 2048)
_THREADED_BYTES = 2**23  # below 8 MiB of scores the pool's start-up costs more than it saves


def table_lead(x: Inputs) -> tuple[int, ...]:
    """Leading shape of the score table: q's and k's leading axes, and the mask's."""
    shapes = [x.q.shape[:-2], x.k.shape[:-2]]
    if x.mask is not None:
        shapes.append(x.mask._shape(x.n, x.m, len(x.lead))[:-2])
    return tuple(np.broadcast_shapes(*shapes))


def _raise_empty(x: Inputs, rows: np.ndarray) -> None:
    rows = [tuple(int(i) for i in r) for r in rows]
    lead_ndim = len(rows[0]) - 1
    if x.mask is None:
        raise_fully_masked(rows, "non-finite scores: q or k hold -inf")
    # The score table may have more leading axes than the mask needs; blame the mask's view.
    raise_fully_masked(rows, x.mask.blame(x.n, x.m, lead_ndim, rows[0]))


def attention(
    q,
    k,
    v,
    mask=None,
    *,
    scale=None,
    return_weights=False,
    check_finite=True,
    method="auto",
    block_size=None,
    threads=None,
    memory_budget=None,
):
    """Scaled dot-product attention: softmax(q kᵀ · scale + mask) v (§6.2).

    Args:
        q: queries, (..., N, d_k).
        k: keys, (..., M, d_k).
        v: values, (..., M, d_v). Leading axes of q, k, v broadcast; N != M and d_k != d_v
            are fine (cross-attention).
        mask: None | a ``attnlab.masks`` spec | bool array (True = may attend) | float array
            added to the scaled scores (0 / -inf); broadcastable to (..., N, M).
        scale: None for 1/sqrt(d_k); any number multiplies q kᵀ (1.0 = unscaled).
        return_weights: also return the attention weights.
        check_finite: refuse NaN/inf in q, k, v.
        method: "dense" computes the whole (..., N, M) table, as §6.2 draws it. "blockwise"
            computes the same result tile by tile with the online softmax (see
            ``attnlab.core.blockwise``), in memory that grows with N, skipping tiles a mask
            blocks. "auto" (default) is dense unless the score table would exceed
            ``memory_budget``, so a long sequence never runs out of memory by accident. With
            return_weights=True, "auto" stays dense, since the table is then the answer, and
            raises AttnlabError instead if that table is over the budget (pass method="dense"
            to insist).
        block_size: blockwise tile, an int or (query rows, keys); default (512, 512).
        threads: how many cores to use (blockwise: query blocks, dense: bands of rows of the
            softmax); default os.cpu_count().
        memory_budget: bytes the dense score table may take under "auto"; default
            ``attnlab.core.blockwise.DEFAULT_MEMORY_BUDGET`` (256 MiB), which can be reassigned.

    Returns:
        output (..., N, d_v), or (output, weights (..., N, M)). float32 stays float32, float64
        stays float64, integers compute in float64.

    Raises:
        ShapeError, NonFiniteInputError, FullyMaskedRowError (a row that allows no key).

    >>> q = [[3, -3], [1, 1]]; k = [[-3, 3], [1, 1]]; v = [[0, -1], [1, 2]]
    >>> attention(q, k, v, mask=Causal()).round(3)
    array([[ 0.   , -1.   ],
           [ 0.804,  1.413]])
    """
    from attnlab.core import blockwise

    method = _check_method(method)
    block = blockwise.check_block_size(block_size)
    n_threads = blockwise.check_threads(threads)
    budget = _check_budget(memory_budget)
    x, finite = validate_later(q, k, v, mask, scale=scale, check_finite=check_finite)
    if method == "auto":
        table = blockwise.dense_table_bytes(x.lead, x.n, x.m, x.q.dtype)
        if table <= budget:
            method = "dense"
        elif return_weights:
            raise AttnlabError(
                f"expected the weights table to fit the memory budget of {_mib(budget)}, but "
                f"its shape {x.lead + (x.n, x.m)} needs {_mib(table)}; pass method='dense' to "
                "compute it anyway, or a larger memory_budget"
            )
        else:
            method = "blockwise"
    if method == "blockwise":
        if return_weights:
            blockwise.raise_no_weights()
        return blockwise.run(x, *block, n_threads, check=finite)
    if finite is not None:
        finite()
    return _attend(x, want="weights" if return_weights else "output", threads=n_threads)


_METHODS = ("auto", "dense", "blockwise")


def _check_method(method) -> str:
    if method not in _METHODS:
        raise AttnlabError(f"expected method to be one of {_METHODS}, but got {method!r} instead")
    return method


def _check_budget(budget) -> float:
    from attnlab.core import blockwise

    if budget is None:
        return blockwise.DEFAULT_MEMORY_BUDGET
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int | float | np.integer | np.floating)
        or not budget > 0
    ):
        raise AttnlabError(
            f"expected memory_budget to be a positive number of bytes, but got {budget!r} instead"
        )
    return budget


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"


_STAGES = ("scores", "scaled", "masked", "weights", "output")
_CAPTIONS = {
    "scores": "1. scores  Q Kᵀ  (N x M)",
    "scaled": "2. scaled  Q Kᵀ · scale",
    "masked": "3. masked  + M  (-inf where blocked)",
    "weights": "4. weights  softmax of each row",
    "output": "5. output  weights · V  (N x d_v)",
}


@dataclass(frozen=True, repr=False)
class AttentionTrace:
    """Every table of the chapter's diagram for one attention call.

    Attributes:
        q, k, v: the inputs (compute dtype).
        scores: q kᵀ, (..., N, M).   scaled: scores · scale.   masked: scaled + mask.
        weights: softmax of each masked row, (..., N, M).   output: weights · v, (..., N, d_v).
        scale: the factor applied (1/sqrt(d_k) by default).   mask: the Mask used, or None.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray
    scaled: np.ndarray
    masked: np.ndarray
    weights: np.ndarray
    output: np.ndarray
    scale: float
    mask: Mask | None

    def stages(self) -> list[tuple[str, str, np.ndarray]]:
        """(name, caption, table) for each step, in order."""
        return [(s, _CAPTIONS[s], getattr(self, s)) for s in _STAGES]

    def __repr__(self) -> str:
        return (
            f"AttentionTrace(N={self.scores.shape[-2]}, M={self.scores.shape[-1]}, "
            f"scale={self.scale:.6g}, mask={self.mask!r})"
        )

    def __str__(self) -> str:
        lines = [repr(self)]
        for _, caption, table in self.stages():
            lines += ["", caption, format_table(table)]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from html import escape

        parts = [f"<div class='attnlab-trace'><p><code>{escape(repr(self))}</code></p>"]
        for _, caption, table in self.stages():
            parts.append(f"<p><b>{escape(caption)}</b></p>")
            for index, mat in _matrices(table):
                if index:
                    parts.append(f"<p><i>[{', '.join(map(str, index))}]</i></p>")
                rows = "".join(
                    "<tr>" + "".join(f"<td>{escape(_fmt(x))}</td>" for x in row) + "</tr>"
                    for row in mat
                )
                parts.append(f"<table>{rows}</table>")
        return "".join(parts) + "</div>"


def _fmt(x: float) -> str:
    if np.isneginf(x):
        return "-inf"
    return f"{x:.4g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.3e}"


def _matrices(table: np.ndarray):
    for index in np.ndindex(table.shape[:-2]):
        yield index, table[index]


def format_table(table: np.ndarray) -> str:
    """Aligned plain-text rendering of a (..., rows, cols) table."""
    out = []
    for index, mat in _matrices(np.asarray(table)):
        if index:
            out.append(f"[{', '.join(map(str, index))}]")
        cells = [[_fmt(float(x)) for x in row] for row in mat]
        width = max((len(c) for row in cells for c in row), default=1)
        out += ["  [ " + "  ".join(c.rjust(width) for c in row) + " ]" for row in cells]
    return "\n".join(out)


def trace_attention(q, k, v, mask=None, *, scale=None) -> AttentionTrace:
    """Attention with every intermediate table kept, for checking a computation by hand.

    Same arguments and errors as ``attention``. The chapter's two-token example (§6.2):

    >>> t = trace_attention([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]], Causal())
    >>> t.scores
    array([[-18.,   0.],
           [  0.,   2.]])
    >>> t.weights.round(3)
    array([[1.   , 0.   ],
           [0.196, 0.804]])
    """
    x = validate(q, k, v, mask, scale=scale)
    out, weights, tables = _attend(x, want="trace")
    return AttentionTrace(
        q=x.q, k=x.k, v=x.v, weights=weights, output=out, scale=x.scale, mask=x.mask, **tables
    )


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    rng=None,
    fully_masked="raise",
    check_finite=True,
):
    """``torch.nn.functional.scaled_dot_product_attention``'s signature and semantics, in numpy.

    Shape legend (PyTorch's letters): query (..., Hq, L, E), key (..., H, S, E),
    value (..., H, S, Ev); output (..., Hq, L, Ev).

    Args:
        attn_mask: bool (True = takes part in attention) or float (added to the scores),
            broadcastable to (..., L, S).
        dropout_p: probability of zeroing a weight (survivors scale by 1/(1 - p)); draws from
            ``rng`` (a numpy Generator or a seed).
        is_causal: top-left causal mask (query i sees keys 0..i); exclusive with attn_mask.
        scale: None for 1/sqrt(E).
        enable_gqa: grouped-query attention: key/value heads H divide query heads Hq, and each
            key/value head serves Hq/H consecutive query heads.
        fully_masked: "raise" (default) raises FullyMaskedRowError for a query row that may
            attend to no key; "zero" returns zeros for it, which is what PyTorch 2.x returns.
            attnlab raises by default because a silent zero hides a bug in the mask.
    """
    if fully_masked not in ("raise", "zero"):
        raise AttnlabError(f"expected fully_masked 'raise' or 'zero', but got {fully_masked!r}")
    if is_causal and attn_mask is not None:
        raise AttnlabError("expected either attn_mask or is_causal=True, but got both")
    if not 0.0 <= float(dropout_p) < 1.0:
        raise AttnlabError(f"expected 0 <= dropout_p < 1, but got {dropout_p!r} instead")
    query, key, value = _as_real("query", query), _as_real("key", key), _as_real("value", value)
    if enable_gqa:
        key, value = _repeat_kv(query, key, value)
    x = validate(
        query,
        key,
        value,
        Causal() if is_causal else attn_mask,
        scale=scale,
        check_finite=check_finite,
    )
    if dropout_p == 0.0:
        return _attend(x, empty_rows=fully_masked)
    _, weights = _attend(x, want="weights", empty_rows=fully_masked)
    rng = np.random.default_rng(rng)
    keep = rng.random(weights.shape) >= dropout_p
    weights *= keep / weights.dtype.type(1.0 - dropout_p)
    return weights @ x.v  # (..., Hq, L, Ev)


def _repeat_kv(query: np.ndarray, key: np.ndarray, value: np.ndarray):
    if query.ndim < 3 or key.ndim < 3 or value.ndim < 3:
        raise ShapeError(
            "expected enable_gqa inputs of shape (..., heads, rows, width), but got "
            f"query.shape={query.shape}, key.shape={key.shape}, value.shape={value.shape}"
        )
    hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
    if hk != hv or hq % hk:
        raise ShapeError(
            "expected key and value to share a head count that divides the query heads, but got "
            f"query.shape={query.shape}, key.shape={key.shape} and value.shape={value.shape}"
        )
    group = hq // hk
    return np.repeat(key, group, axis=-3), np.repeat(value, group, axis=-3)  # (..., Hq, S, E)
