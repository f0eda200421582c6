"""Text generation with a key/value cache: ``Model.generate`` and ``Model.stream``.

Shape legend: B batch, N prompt tokens, S = N + new the cache's rows, h query heads, h_kv
key/value heads, d head width, V vocabulary.

The prompt runs once, writing every layer's keys and values into a cache (B, S, h_kv, d);
each new token then runs alone, its query attending to the cached rows through
``attnlab.flash.flash_attn_with_kvcache`` (causal, the layer's sliding window, Gemma 2's
softcap), so the prefix is never run again. gpt-oss's sinks are one logit per head in each
row's divisor: the call returns each row's log-sum-exp ``lse``, and the output without the
sink is scaled by exp(lse) / (exp(lse) + exp(sink)), which is the same softmax with the sink.
Llama 4's chunked layers (a row sees only its own chunk's earlier rows, which no window
describes) go to ``attnlab.attention`` with ``Causal() + Chunks(size)`` instead. Phi-3's LongRoPE turns every
position by other angles once the text is longer than its switch, so the first step past it
runs the whole text again (as transformers' generate does).

Decoding: temperature 0 takes the argmax (transformers' ``do_sample=False``); otherwise the
logits are divided by the temperature, cut to the ``top_k`` largest and to the smallest set
whose probabilities reach ``top_p`` (as transformers' warpers), and a token is drawn with
numpy's generator seeded by ``seed``. ``stop``: token ids that end a sequence; a sequence that
has stopped keeps repeating its stop token until every sequence has stopped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.kernels._threads import one_blas_thread
from attnlab.models.inside._points import Pass

__all__ = ["KVCache", "generate", "stream"]


class KVCache:
    """Every layer's keys and values so far, (B, S, h_kv, d) each, and how many rows are full."""

    def __init__(self, layers: int, batch: int, rows: int, kv_heads: int, head_dim: int, dtype):
        size = (batch, rows, kv_heads, head_dim)
        self.k = [np.zeros(size, dtype) for _ in range(layers)]
        self.v = [np.zeros(size, dtype) for _ in range(layers)]
        self.length = 0

    def attend(self, i, q, k, v, *, window=None, scale, softcap=None, sinks=None, chunk=None):
        """Layer ``i``: append k, v (B, h_kv, N, d) at row ``length`` and attend q (B, h, N, d)
        to every row so far; the output z is (B, N, h, d)."""
        from attnlab.flash import flash_attn_with_kvcache

        if chunk is not None:
            return self._chunked(i, q, k, v, scale, chunk)
        out = flash_attn_with_kvcache(
            np.ascontiguousarray(q.transpose(0, 2, 1, 3)),  # (B, N, h, d)
            self.k[i], self.v[i],
            k=np.ascontiguousarray(k.transpose(0, 2, 1, 3)),  # (B, N, h_kv, d)
            v=np.ascontiguousarray(v.transpose(0, 2, 1, 3)),
            cache_seqlens=self.length, softmax_scale=scale, causal=True,
            window_size=(-1, -1) if window is None else (window - 1, 0),
            softcap=0.0 if softcap is None else softcap,
            return_softmax_lse=sinks is not None,
        )  # fmt: skip
        if sinks is None:
            return out
        out, lse = out  # (B, N, h, d), (B, h, N)
        keep = 1.0 / (1.0 + np.exp(sinks[:, None] - lse))  # (B, h, N): the sink's share left out
        return out * keep.transpose(0, 2, 1)[..., None]  # (B, N, h, d)

    def _chunked(self, i, q, k, v, scale, chunk):
        """Llama 4's chunked layers: row r sees the cached rows j <= r of its own chunk, a
        mask no window describes, so it goes to ``attnlab.attention`` as Causal + Chunks."""
        import attnlab as al

        b, h, n, d = q.shape
        h_kv, start, end = k.shape[1], self.length, self.length + n
        self.k[i][:, start:end] = k.transpose(0, 2, 1, 3)  # (B, N, h_kv, d)
        self.v[i][:, start:end] = v.transpose(0, 2, 1, 3)
        # the new rows sit at positions start..end-1 of the S = end keys: bottom-right aligned
        mask = al.masks.Causal(align="bottom_right") + al.masks.Chunks(chunk, align="bottom_right")
        out = al.attention(
            q.reshape(b, h_kv, h // h_kv, n, d),  # (B, h_kv, g, N, d)
            self.k[i][:, :end].transpose(0, 2, 1, 3)[:, :, None],  # (B, h_kv, 1, S, d)
            self.v[i][:, :end].transpose(0, 2, 1, 3)[:, :, None],
            mask, scale=scale,
        )  # fmt: skip
        return out.reshape(b, h, n, d).transpose(0, 2, 1, 3)  # (B, N, h, d)


def _check_seed(seed) -> None:
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**128
    ):
        raise AttnlabError(
            f"expected seed to be None or an integer in [0, 2**128), but got {seed!r} instead"
        )


def _check_cache_fits(model, batch: int, total: int) -> None:
    """Refuse a key/value cache past half of this machine's memory before allocating it."""
    s = model.shape
    heads = getattr(model.network, "cache_heads", None) or (s.kv_heads, s.head_dim)
    need = 2 * s.layers * batch * total * heads[0] * heads[1] * model.dtype.itemsize
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return
    if need > memory // 2:
        raise AttnlabError(
            f"expected a key/value cache within half of this machine's memory "
            f"({memory / 2**31:.1f} GiB), but the prompt and max_new_tokens ({total} tokens) "
            f"need {need / 2**30:.3g} GiB; ask for fewer new tokens"
        )


def _check(model, max_new_tokens, temperature, top_k, top_p, stop):
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer):
        raise AttnlabError(
            f"expected max_new_tokens to be an integer >= 0, but got {max_new_tokens!r} instead"
        )
    if max_new_tokens < 0:
        raise AttnlabError(f"expected max_new_tokens >= 0, but got {max_new_tokens} instead")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise AttnlabError(f"expected temperature to be a number >= 0, but got {temperature!r}")
    if not temperature >= 0 or not np.isfinite(temperature):
        raise AttnlabError(f"expected temperature >= 0, but got {temperature!r} instead")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise AttnlabError(f"expected top_k to be None or an integer >= 1, but got {top_k!r}")
    if top_p is not None and (
        isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1
    ):
        raise AttnlabError(f"expected top_p to be None or a number in (0, 1], but got {top_p!r}")
    if stop is None:
        return np.empty(0, np.int64)
    try:
        ids = np.asarray([stop] if np.isscalar(stop) else list(stop))
    except (TypeError, ValueError):  # not a sequence, or one numpy cannot make an array of
        ids = np.asarray([], object)
    if (
        ids.dtype.kind not in "iu"
        or ids.ndim != 1
        or (ids < 0).any()
        or (ids >= model.shape.vocab).any()
    ):
        raise AttnlabError(
            f"expected stop to be a token id or a list of token ids in [0, {model.shape.vocab}), "
            f"but got {stop!r} instead"
        )
    return ids


def _choose(logits, temperature, top_k, top_p, rng) -> np.ndarray:
    """The next token of each sequence from its last logits (B, V)."""
    if temperature == 0:
        return logits.argmax(-1)  # (B,)
    z = logits.astype(np.float64) / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.sort(z, -1)[:, -top_k][:, None]  # (B, 1)
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1:
        order = np.argsort(p, -1)  # ascending, as transformers' top-p warper sorts
        cum = np.cumsum(np.take_along_axis(p, order, -1), -1)
        drop = cum <= 1 - top_p
        drop[:, -1] = False  # the likeliest token always stays
        np.put_along_axis(p, order, np.where(drop, 0.0, np.take_along_axis(p, order, -1)), -1)
        p /= p.sum(-1, keepdims=True)
    return np.array([rng.choice(len(row), p=row) for row in p])  # (B,)


def stream(
    model, ids, max_new_tokens: int, *, temperature=0.0, top_k=None, top_p=None, seed=None,
    stop=None,
) -> Iterator[np.ndarray]:  # fmt: skip
    """Each step's new tokens (B,), as they are chosen (see the module's notes)."""
    stops = _check(model, max_new_tokens, temperature, top_k, top_p, stop)
    _check_seed(seed)
    ids = model.as_ids(ids)
    b, n = ids.shape
    _check_cache_fits(model, b, n + max_new_tokens)
    s = model.shape
    limit = s.max_positions
    if limit is not None and n + max_new_tokens > limit:
        raise AttnlabError(
            f"expected the prompt and max_new_tokens to fit the model's {limit} learned "
            f"positions, but got {n} + {max_new_tokens} instead"
        )
    if max_new_tokens == 0:
        return
    rng = np.random.default_rng(seed)
    # (h_kv, d) of a cache row; DeepSeek's latent cache is one head of its own width
    heads = getattr(model.network, "cache_heads", None) or (s.kv_heads, s.head_dim)
    cache = KVCache(s.layers, b, n + max_new_tokens, *heads, model.dtype)
    done = np.zeros(b, bool)
    last = np.zeros(b, np.int64)
    step = seen = ids
    switch = getattr(model.network, "rerun_past", None)
    for i in range(max_new_tokens):
        if switch is not None and 0 < cache.length <= switch < seen.shape[1]:
            # Phi-3's LongRoPE changes every position's rotation once the text passes the
            # switch: the whole text runs again, as transformers' generate does there.
            cache.length, step = 0, seen
        if i == 0 or step.shape[1] > 1:
            logits, _ = model.network.forward(step, Pass(weights=False, kv=cache))
        else:  # one token's products are too small for BLAS threads to pay for themselves
            with one_blas_thread():
                logits, _ = model.network.forward(step, Pass(weights=False, kv=cache))
        cache.length += step.shape[1]
        token = _choose(logits[:, -1], temperature, top_k, top_p, rng).astype(np.int64)
        token = np.where(done, last, token)  # a stopped sequence repeats its stop token
        yield token
        seen = np.concatenate([seen, token[:, None]], 1)  # (B, S)
        last = token
        done |= np.isin(token, stops)
        if done.all():
            return
        step = token[:, None]  # (B, 1)


def generate(model, ids, max_new_tokens: int, **options) -> np.ndarray:
    """(B, N + new): the prompt's ids followed by the new ones (fewer than max_new_tokens when
    every sequence stopped)."""
    prompt = model.as_ids(ids)
    new = list(stream(model, prompt, max_new_tokens, **options))
    if not new:
        return prompt.copy()
    return np.concatenate([prompt, np.stack(new, 1)], 1)  # (B, N + new)
