"""Attention kernels written in torch for verify's tests and benchmarks: a correct one (SDPA
in float32 on inputs held in float16 or bfloat16, each output rounded once, as a fused kernel
with float32 accumulation would give it) and kernels with one planted bug each.

Shape legend: B batch, h query heads, h_kv key/value heads (g = h / h_kv), N queries, M keys,
d head width. Every tensor is laid out (B, h, N, d) (``layout="bhsd"``), lse (B, h, N).

The planted bugs are each a kernel engineer's mistake, written from its description (nothing
here is read from attnlab): the arrays returned are what ``attnlab.verify`` receives.
"""

from __future__ import annotations

import math
import zlib

import ml_dtypes


def to_numpy(torch, x):
    """A torch tensor as numpy, bfloat16 as ``ml_dtypes.bfloat16`` (numpy has none)."""
    x = x.detach().contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def inputs(torch, dtype, *, b=1, h=2, h_kv=1, n=64, m=64, d=32, seed=0, backward=False):
    """q, k, v (and do) drawn from a normal distribution, held in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"q": (b, h, n, d), "k": (b, h_kv, m, d), "v": (b, h_kv, m, d)}
    if backward:
        shapes["do"] = (b, h, n, d)
    return {name: torch.randn(s, generator=g).to(dtype) for name, s in shapes.items()}


def allowed(torch, n, m, causal, window=None):
    """(N, M) bool: FlashAttention's bottom-right causal and left window."""
    i = torch.arange(n)[:, None] + m - n
    j = torch.arange(m)[None, :]
    ok = torch.ones(n, m, dtype=torch.bool)
    if causal:
        ok &= j <= i
    if window is not None:
        ok &= j >= i - window
    return ok


def scores(torch, q, k, scale):
    """float32 scores (B, h, N, M), k repeated over each group (GQA)."""
    g = q.shape[1] // k.shape[1]
    return (q.float() @ k.float().repeat_interleave(g, 1).transpose(-1, -2)) * scale


def correct(torch, x, *, causal=False, window=None, lse=True):
    """The case a correct kernel writes: float32 work, each output rounded to the inputs' dtype."""
    q, k, v = x["q"], x["k"], x["v"]
    dtype, (n, m, d) = q.dtype, (q.shape[2], k.shape[2], q.shape[3])
    mask = allowed(torch, n, m, causal, window)
    empty = ~mask.any(-1, keepdim=True)  # (N, 1): rows that see no key answer 0
    leaves = [t.float().requires_grad_("do" in x) for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(
        *leaves, attn_mask=mask | empty, enable_gqa=True
    ).masked_fill(empty, 0.0)  # (B, h, N, d)
    case = {"q": q, "k": k, "v": v, "out": out.detach().to(dtype)}
    if lse:
        s = scores(torch, q, k, 1 / math.sqrt(d)).masked_fill(~mask, -math.inf)
        case["lse"] = torch.logsumexp(s, -1)  # float32, as FlashAttention keeps it
    if "do" in x:
        grads = torch.autograd.grad(out, leaves, x["do"].float())
        case.update(
            do=x["do"], **{n: t.to(dtype) for n, t in zip(("dq", "dk", "dv"), grads, strict=True)}
        )
    return {name: to_numpy(torch, t) for name, t in case.items()}


def bf16_pv_accumulation(torch, x, *, causal=False):
    """P in float32, rounded to bfloat16, and P . V summed key by key in bfloat16: each partial
    sum rounded, the low-precision accumulation that loses the small terms."""
    q, k, v = x["q"], x["k"], x["v"]
    n, m, d = q.shape[2], k.shape[2], q.shape[3]
    mask = allowed(torch, n, m, causal)
    s = scores(torch, q, k, 1 / math.sqrt(d)).masked_fill(~mask, -math.inf)
    p = torch.softmax(s, -1).to(torch.bfloat16)  # (B, h, N, M)
    vg = v.repeat_interleave(q.shape[1] // k.shape[1], 1)  # (B, h, M, d)
    acc = torch.zeros(q.shape[:3] + (vg.shape[-1],), dtype=torch.bfloat16)
    for j in range(m):  # one rounding per key: the accumulator is bfloat16
        acc = (acc.float() + p[..., j : j + 1].float() * vg[..., j : j + 1, :].float()).to(
            torch.bfloat16
        )
    case = {"q": q, "k": k, "v": v, "out": acc}
    return {name: to_numpy(torch, t) for name, t in case.items()}


#: The calibration sweep of correct kernels: dtype, causal, (h, h_kv), N, M, d. The test takes
#: a fixed sample; benchmarks/verify_mean_sweep.py runs it whole.
SWEEP_DTYPES = ("float16", "bfloat16")
SWEEP_HEADS = ((4, 4), (8, 2), (4, 1))  # MHA, GQA, MQA
SWEEP_LENGTHS = (1, 2, 7, 64, 257, 1024, 4096)
SWEEP_WIDTHS = (32, 64, 128, 256)


def sweep():
    """Every case of the sweep, as (dtype name, causal, (h, h_kv), N, M, d)."""
    for dtype in SWEEP_DTYPES:
        for causal in (False, True):
            for heads in SWEEP_HEADS:
                for n in SWEEP_LENGTHS:
                    for m in SWEEP_LENGTHS:
                        for d in SWEEP_WIDTHS:
                            yield dtype, causal, heads, n, m, d


def sweep_case(torch, dtype, causal, heads, n, m, d, *, backward_pairs=2**16):
    """One correct kernel's case of the sweep (its backward too while N x M is small)."""
    x = inputs(
        torch, getattr(torch, dtype), h=heads[0], h_kv=heads[1], n=n, m=m, d=d,
        seed=zlib.crc32(repr((dtype, causal, heads, n, m, d)).encode()), backward=n * m <= backward_pairs,
    )  # fmt: skip
    return correct(torch, x, causal=causal)


def planted(torch, x, bug=None, *, causal=False, window=None, softcap=0.0, sinks=None):
    """The case a kernel with one planted ``bug`` (a diagnosis cause, or None) writes: float32
    work on (B, h, N, d) inputs, each output rounded to their dtype, lse in float32.
    ``window``: FlashAttention's left reach (with ``causal``); ``sinks`` (h,) float32."""
    q, k, v = x["q"].float(), x["k"].float(), x["v"].float()
    (b, h, n, d), (h_kv, m) = q.shape, k.shape[1:3]
    scale = {"scale": 1.0}.get(bug, 1 / math.sqrt(d))
    kv_of = torch.arange(h) % h_kv if bug == "gqa_mapping" else torch.arange(h) // (h // h_kv)
    raw = q @ k[:, kv_of].transpose(-1, -2)  # (B, h, N, M)
    if softcap and bug == "softcap_order":
        s = softcap * torch.tanh(raw / softcap) * scale  # the cap before the scale
    elif softcap:
        s = softcap * torch.tanh(raw * scale / softcap)
    else:
        s = raw * scale
    i = torch.arange(n)[:, None] + (0 if bug == "causal_alignment" else m - n)
    j = torch.arange(m)[None, :]
    seen = torch.ones(n, m, dtype=torch.bool)
    if causal:
        seen &= j <= i + (1 if bug == "causal_offset" else 0)
    if window is not None:
        seen &= j >= i - window - (1 if bug == "window_offset" else 0)
    if bug == "dropped_keys":
        seen[:, 64:96] = False  # one key block of 32 never loaded
    s = s.masked_fill(~seen, -math.inf)
    if sinks is not None and bug != "missing_sink":
        sink = sinks.float()[None, :, None, None].expand(b, h, n, 1)
        s = torch.cat([s, sink], -1)  # the sink's logit joins the denominator
        v_all = torch.cat([v[:, kv_of], torch.zeros(b, h, 1, v.shape[-1])], -2)
    else:
        v_all = v[:, kv_of]
    out = torch.softmax(s, -1) @ v_all  # (B, h, N, d_v)
    out = out.nan_to_num(0.0)  # a row that sees no key (and no sink) answers 0
    lse = torch.logsumexp(s, -1)  # (B, h, N)
    if bug == "lse_base":
        lse = lse / math.log(2)
    if bug == "head_permutation":
        order = torch.tensor([1, 0, *range(2, h)])
        out, lse = out[:, order], lse[:, order]
    out = out.to(x["q"].dtype)
    if bug == "transposed_output":  # (B, N, h, d) memory handed over as (B, h, N, d)
        out = out.transpose(1, 2).contiguous().reshape(b, h, n, -1)
    case = {"q": x["q"], "k": x["k"], "v": x["v"], "out": out, "lse": lse}
    return {name: to_numpy(torch, t) for name, t in case.items()}
