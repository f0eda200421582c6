"""Latent attention without torch: random weights, both forms against a plain-numpy reading of
the naive form (decompress each head's key and value, softmax of the causal scores)."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.models._mla import MLA
from attnlab.models.inside._points import Pass

H, DN, DR, DV, R, RQ, DM, N = 3, 4, 4, 5, 6, 7, 8, 5


def _mla(rng, q_lora: bool, interleave: bool) -> MLA:
    w = {
        "kv_a_proj": rng.normal(size=(R + DR, DM)),
        "kv_a_norm": rng.normal(size=R),
        "kv_b_proj": rng.normal(size=(H * (DN + DV), R)),
        "o_proj": rng.normal(size=(DM, H * DV)),
    }
    if q_lora:
        w |= {"q_a_proj": rng.normal(size=(RQ, DM)), "q_a_norm": rng.normal(size=RQ),
              "q_b_proj": rng.normal(size=(H * (DN + DR), RQ))}  # fmt: skip
    else:
        w["q_proj"] = rng.normal(size=(H * (DN + DR), DM))
    return MLA(w, H, DN, DR, DV, R, scale=0.37, interleave=interleave)


def _by_hand(mla: MLA, x, cos, sin):
    """z (B, N, h, d_v): the naive form written out, one head at a time."""

    def norm(v, w):
        return v / np.sqrt(np.mean(v * v, -1, keepdims=True) + 1e-6) * w

    def turn(v):  # rotate-half on (evens | odds) when interleaved
        if mla.interleave:
            v = np.concatenate([v[..., 0::2], v[..., 1::2]], -1)
        half = v.shape[-1] // 2
        return v * cos + np.concatenate([-v[..., half:], v[..., :half]], -1) * sin

    w = mla.w
    q = (
        x @ w["q_proj"].T
        if "q_proj" in w
        else norm(x @ w["q_a_proj"].T, w["q_a_norm"]) @ w["q_b_proj"].T
    )
    ckv = x @ w["kv_a_proj"].T
    c, k_r = norm(ckv[..., :R], w["kv_a_norm"]), turn(ckv[..., R:])
    kv = c @ w["kv_b_proj"].T
    z = np.zeros((x.shape[0], N, H, DV))
    for h in range(H):
        qh = q[..., h * (DN + DR) : (h + 1) * (DN + DR)]
        qh = np.concatenate([qh[..., :DN], turn(qh[..., DN:])], -1)
        kvh = kv[..., h * (DN + DV) : (h + 1) * (DN + DV)]
        kh = np.concatenate([kvh[..., :DN], k_r], -1)
        s = qh @ kh.swapaxes(-1, -2) * mla.scale + np.triu(np.full((N, N), -np.inf), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        z[:, :, h] = (p / p.sum(-1, keepdims=True)) @ kvh[..., DN:]
    return z


@pytest.mark.parametrize("q_lora", [True, False])
@pytest.mark.parametrize("interleave", [True, False])
def test_both_forms_are_the_naive_form_by_hand(q_lora, interleave):
    rng = np.random.default_rng(0)
    mla = _mla(rng, q_lora, interleave)
    x = rng.normal(size=(2, N, DM))
    angles = np.arange(N)[:, None] * np.array([1.0, 0.1])[None]  # (N, d_r / 2)
    cos, sin = np.cos(np.concatenate([angles] * 2, -1)), np.sin(np.concatenate([angles] * 2, -1))
    want = _by_hand(mla, x, cos, sin)
    for form in ("naive", "absorbed"):
        z, layer = mla(0, x, cos, sin, Pass(options={"mla": form}))
        np.testing.assert_allclose(z, want, rtol=0, atol=1e-12)
    assert layer.k.shape == (2, 1, N, R + DR)  # the absorbed form: one latent key/value head
