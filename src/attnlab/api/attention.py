"""Scaled dot-product attention, softmax(Q Kᵀ · scale + mask) V, exactly as §6.2 writes it.

Shape legend (the chapter's letters):
    ...  leading batch axes, broadcast between q, k and v (for example (B,) or (B, h))
    N    query rows            M    key rows (in self-attention M = N)
    d_k  query and key width   d_v  value width

The public dispatchers: each validates once (``core/_validate.py``) and hands the validated
inputs to a kernel, the dense one (``kernels/dense.py``) or the blockwise one
(``kernels/blockwise.py``). Kernels never import this module back.
"""

from __future__ import annotations

import numpy as np

from attnlab.api._overflow import (
    checked_forward,
    checked_trace,
    fold_tiny_scale,
    quiet,
    refuse_impossible_table,
)
from attnlab.core._grad import check_grad_output
from attnlab.core._validate import (
    as_real,
    check_block_size,
    check_budget,
    check_method,
    check_threads,
    validate,
    validate_later,
)
from attnlab.core._variants import check_fully_masked, with_variants
from attnlab.core.masks import Causal, SlidingWindow
from attnlab.core.trace import AttentionTrace
from attnlab.errors import AttnlabError, ShapeError
from attnlab.kernels import _small, blockwise
from attnlab.kernels.dense import dense_output, dense_tables, dense_weights
from attnlab.kernels.dense_backward import dense_grad_tables

__all__ = ["AttentionTrace", "attention", "scaled_dot_product_attention", "trace_attention"]


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
    softcap=None,
    sinks=None,
    return_lse=False,
    fully_masked="raise",
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
        return_weights: also return the attention weights. check_finite: refuse NaN/inf.
        method: "dense" computes the whole (..., N, M) table, as §6.2 draws it. "blockwise"
            computes the same result tile by tile with the online softmax (see
            ``attnlab.kernels.blockwise``), in memory that grows with N, skipping tiles a mask
            blocks. "auto" (default) picks the faster of the two from measured crossovers
            (``choose_method``), and blockwise whenever the score table would exceed
            ``memory_budget``. With return_weights=True it stays dense (the table is then the
            answer) and raises AttnlabError if that table is over the budget.
        block_size: blockwise tile, an int or (query rows, keys); default (512, 512).
        threads: cores to use (query blocks, or bands of rows); default os.cpu_count().
        memory_budget: bytes the dense score table may take under "auto"; default
            ``attnlab.kernels.blockwise.DEFAULT_MEMORY_BUDGET`` (256 MiB), which can be reassigned.
        softcap: a number c > 0: each scaled score s becomes c · tanh(s / c) before the mask
            is added (Gemma 2's and FlashAttention's soft cap). None: no cap.
        sinks: one logit per head, shape (h,) or (B, h) on q's head axis (-3) (a scalar for
            every row): added to each row's softmax divisor as exp(sink), with no value, so
            the row's weights sum to less than 1 (gpt-oss's attention sinks).
        return_lse: also return each row's log Σ_j exp(score_ij) (natural log; the sink
            included), shape (..., N): the log-sum-exp a backward pass can reuse.
        fully_masked: "raise" (default): FullyMaskedRowError for a row that allows no key.
            "zero": output 0 there (lse -inf), as FlashAttention returns.

    Returns:
        output (..., N, d_v); with return_weights (output, weights (..., N, M)); with
        return_lse the lse (..., N) last. float32 stays float32, float64 stays float64,
        integers compute in float64.

    Raises:
        ShapeError, NonFiniteInputError, FullyMaskedRowError (a row that allows no key),
        NonFiniteResultError (finite inputs whose result would not be).

    >>> q = [[3, -3], [1, 1]]; k = [[-3, 3], [1, 1]]; v = [[0, -1], [1, 2]]
    >>> attention(q, k, v, mask=Causal()).round(3)
    array([[ 0.   , -1.   ],
           [ 0.804,  1.413]])
    """
    options = (block_size, threads, memory_budget, check_finite, softcap, sinks, fully_masked)
    if plain_call(*options):  # a small problem with every check passed: see kernels/_small.py
        fast = _small.small_attention(q, k, v, mask, scale, method, return_weights, return_lse)
        if fast is not None:
            return fast
    method, block, n_threads, budget = check_options(method, block_size, threads, memory_budget)
    empty = check_fully_masked(fully_masked)
    x, finite = validate_later(q, k, v, mask, scale=scale, check_finite=check_finite)
    x = with_variants(x, softcap, sinks)
    method = choose_method(method, x.lead, x.n, x.m, x.q.dtype, budget, return_weights, x.mask)
    if method == "blockwise":
        return _blockwise(x, block, n_threads, finite, empty, return_lse)
    if finite is not None:
        finite()
    refuse_impossible_table(x)
    return _dense(fold_tiny_scale(x)[0], n_threads, empty, return_weights, return_lse)


def _blockwise(x, block, n_threads: int, finite, empty: str, return_lse: bool):
    """The blockwise kernel on validated inputs: output, or (output, lse)."""
    lse = np.empty(x.lead + (x.n,), x.q.dtype) if return_lse else None  # (..., N)
    with quiet():  # an output that overflowed is found and redone by checked_forward
        out = blockwise.run(x, *block, n_threads, check=finite, lse=lse, empty_rows=empty)
    out = checked_forward(
        x, out, lambda y: blockwise.run(y, *block, n_threads, lse=lse, empty_rows=empty)
    )
    return (out, lse) if return_lse else out


def _dense(x, n_threads: int, empty: str, return_weights: bool, return_lse: bool):
    """The dense kernel on validated inputs: output, then weights and lse as asked."""

    def kernel(y):
        run = dense_weights if return_weights else dense_output
        return run(y, threads=n_threads, empty_rows=empty, lse=return_lse)

    with quiet():
        result = kernel(x)
    return checked_forward(x, result, kernel)


def plain_call(
    block_size, threads, memory_budget, check_finite, softcap, sinks, fully_masked, **extra
):
    """Whether a call asks for nothing the small-problem fast path leaves to the general one:
    no tuning options, the default checks, none of the variants, and (``extra``) no
    return_lse, no saved lse and the default wrt."""
    return (
        block_size is None
        and threads is None
        and memory_budget is None
        and check_finite is True
        and softcap is None
        and sinks is None
        and isinstance(fully_masked, str)
        and fully_masked == "raise"
        and extra.get("return_lse") in (None, False)
        and extra.get("lse") is None
        and extra.get("wrt", ("q", "k", "v")).__class__ is tuple
        and extra.get("wrt", ("q", "k", "v")) == ("q", "k", "v")
    )


def check_options(method, block_size, threads, memory_budget):
    """(method, (Bq, Bk), threads, memory budget) checked, defaults filled in: the options
    ``attention`` and ``attention_backward`` share."""
    block = check_block_size(block_size, (blockwise.DEFAULT_BLOCK_Q, blockwise.DEFAULT_BLOCK_K))
    # Read the default at call time: it may be reassigned for the process (see blockwise).
    budget = (
        blockwise.DEFAULT_MEMORY_BUDGET if memory_budget is None else check_budget(memory_budget)
    )
    return check_method(method), block, check_threads(threads), budget


#: method="auto"'s crossover: blockwise from this many (query, key) pairs per matrix (N · M),
#: by dtype, once the whole table is past the small-problem path's reach (``_small.SMALL_BYTES``,
#: which answers smaller tables densely). Measured with benchmarks/crossover.py on the 2-core AMD
#: EPYC (B = 1, h = 8, d = 64, CPU time, medians of 3 interleaved rounds, blockwise / dense):
#: float32 no mask 0.94 at N = 256, 1.03 at 512, 0.84 at 1024, 0.89 at 2048; float64 no mask
#: 1.04 at 256, 0.73 at 512, 0.89 at 1024. docs/bench.md has the whole table.
AUTO_BLOCKWISE_PAIRS = {np.dtype(np.float32): 1024 * 1024, np.dtype(np.float64): 512 * 512}
#: The gradients (``attention_backward``) cross over far sooner: blockwise / dense measured
#: 0.09-0.16 at N = 256 and 0.16-0.24 at 512, either dtype, either mask (docs/bench.md).
AUTO_BLOCKWISE_PAIRS_BACKWARD = 256 * 256
#: A mask whose blocked tiles blockwise skips crosses over sooner: float32 causal measured 0.76 at
#: N = 512, 0.61 at 1024 (float64 causal: see docs/bench.md).
_SKIPPING_MASKS = (Causal, SlidingWindow)
_SKIPPING_DIVISOR = 4


def choose_method(
    method: str, lead: tuple[int, ...], n: int, m: int, dtype, budget: float, weights: bool,
    mask=None, backward: bool = False,
) -> str:  # fmt: skip
    """ "dense" or "blockwise" for a validated call: what method="auto" means (see ``attention``):
    dense for a table within the small-problem path's reach or under the measured crossover
    (``AUTO_BLOCKWISE_PAIRS``, sooner for a causal or sliding-window ``mask``, and
    ``AUTO_BLOCKWISE_PAIRS_BACKWARD`` for the gradients), blockwise past it or past the memory
    budget; dense whenever the weights are asked for."""
    if method == "auto":
        table = blockwise.dense_table_bytes(lead, n, m, dtype)
        past = _past_crossover(table, n, m, dtype, mask, backward)
        if table <= budget and (weights or not past):
            return "dense"
        if weights:
            raise AttnlabError(
                f"expected the weights table to fit the memory budget of {_mib(budget)}, but "
                f"its shape {lead + (n, m)} needs {_mib(table)}; pass method='dense' to "
                "compute it anyway, or a larger memory_budget"
            )
        return "blockwise"
    if method == "blockwise" and weights:
        blockwise.raise_no_weights()
    return method


def _past_crossover(table: int, n: int, m: int, dtype, mask, backward: bool) -> bool:
    if table <= _small.SMALL_BYTES:
        return False
    if backward:
        return n * m >= AUTO_BLOCKWISE_PAIRS_BACKWARD
    pairs = AUTO_BLOCKWISE_PAIRS.get(np.dtype(dtype), AUTO_BLOCKWISE_PAIRS[np.dtype(np.float64)])
    if isinstance(mask, _SKIPPING_MASKS):
        pairs //= _SKIPPING_DIVISOR
    return n * m >= pairs


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"


def trace_attention(
    q, k, v, mask=None, *, scale=None, grad_output=None, softcap=None, sinks=None
) -> AttentionTrace:
    """Attention with every intermediate table kept, for checking a computation by hand.

    Same arguments and errors as ``attention`` (softcap adds the table ``capped``; sinks
    enter every row's divisor; ``lse`` is always kept). With ``grad_output`` (∂L/∂output, of the
    output's shape (..., N, d_v)), the trace also keeps every table of the backward pass:
    grad_output, grad_v, grad_weights, grad_scores, grad_q and grad_k (see ``AttentionTrace``;
    the same numbers as ``attention_backward``). The chapter's two-token example (§6.2):

    >>> t = trace_attention([[3, -3], [1, 1]], [[-3, 3], [1, 1]], [[0, -1], [1, 2]], Causal())
    >>> t.scores
    array([[-18.,   0.],
           [  0.,   2.]])
    >>> t.weights.round(3)
    array([[1.   , 0.   ],
           [0.196, 0.804]])

    Backward, for a loss that sums the output (grad_output all ones): dV = Pᵀ dO.

    >>> t = trace_attention(t.q, t.k, t.v, Causal(), grad_output=[[1, 1], [1, 1]])
    >>> t.grad_v.round(3)
    array([[1.196, 1.196],
           [0.804, 0.804]])
    """
    x = with_variants(validate(q, k, v, mask, scale=scale), softcap, sinks)
    with quiet():  # a table that overflowed is named by checked_trace
        tables = dense_tables(x)
        if grad_output is not None:
            tables.update(dense_grad_tables(x, tables, check_grad_output(x, grad_output)))
    checked_trace(x, tables)
    return AttentionTrace(
        q=x.q, k=x.k, v=x.v, scale=x.scale, mask=x.mask, softcap=x.softcap, sinks=x.sinks, **tables
    )


# torch's parameters in torch's order, written as torch's documentation lists them.
def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
    enable_gqa=False, *, rng=None, fully_masked="raise", check_finite=True,
):  # fmt: skip
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
    check_fully_masked(fully_masked)
    if is_causal and attn_mask is not None:
        raise AttnlabError("expected either attn_mask or is_causal=True, but got both")
    if (
        isinstance(dropout_p, bool)
        or not isinstance(dropout_p, int | float | np.integer | np.floating)
        or not 0.0 <= dropout_p < 1.0
    ):
        raise AttnlabError(f"expected 0 <= dropout_p < 1, but got {dropout_p!r} instead")
    query, key, value = as_real("query", query), as_real("key", key), as_real("value", value)
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
        with quiet():
            out = dense_output(x, empty_rows=fully_masked)
        return checked_forward(x, out, lambda y: dense_output(y, empty_rows=fully_masked))
    _, weights = dense_weights(x, empty_rows=fully_masked)
    try:  # a Generator, None, or a seed: a non-negative int (or a sequence of them)
        rng = np.random.default_rng(rng)
    except (TypeError, ValueError):
        raise AttnlabError(
            f"expected rng to be a numpy Generator or a non-negative integer seed, but got "
            f"{rng!r} instead"
        ) from None
    keep = rng.random(weights.shape) >= dropout_p
    weights *= keep / weights.dtype.type(1.0 - dropout_p)
    with quiet():
        out = weights @ x.v  # (..., Hq, L, Ev)
    return checked_forward(x, out, lambda y: weights @ y.v)


def _repeat_kv(query: np.ndarray, key: np.ndarray, value: np.ndarray):
    if query.ndim < 3 or key.ndim < 3 or value.ndim < 3:
        raise ShapeError(
            "expected enable_gqa inputs of shape (..., heads, rows, width), but got "
            f"query.shape={query.shape}, key.shape={key.shape}, value.shape={value.shape}"
        )
    hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
    if hk == 0 or hk != hv or hq % hk:
        raise ShapeError(
            "expected key and value to share a head count that divides the query heads, but got "
            f"query.shape={query.shape}, key.shape={key.shape} and value.shape={value.shape}"
        )
    group = hq // hk
    return np.repeat(key, group, axis=-3), np.repeat(value, group, axis=-3)  # (..., Hq, S, E)
