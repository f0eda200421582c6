"""Multi-head latent attention (MLA, DeepSeek-V2/V3), computed two ways through
``attnlab.attention``.

Shape legend: B batch, N tokens, d_model hidden width, h heads, r = kv_lora_rank (the latent
width), r_q = q_lora_rank, d_n = qk_nope_head_dim, d_r = qk_rope_head_dim,
d_qk = d_n + d_r, d_v = v_head_dim.

Each token's keys and values are stored as one latent c (r numbers, RMS-normed) plus one
rotary key k_r (d_r numbers) shared by every head:

    q     = [x W_DQ → RMSNorm →] W_UQ           (B, h, N, d_qk) = [q_n (d_n) | q_r (d_r)]
    c|k_r = x W_DKV, c = RMSNorm(c)             (B, N, r) and (B, N, d_r)
    q_r, k_r turned by the rotary embedding (only these d_r columns carry position)
    W_UKV = kv_b_proj, per head [W_UK (d_n x r) ; W_UV (d_v x r)]

The **naive** form (what transformers computes) decompresses each head's key and value,
k_h = [c W_UKᵀ | k_r], v_h = c W_UVᵀ, and attends with h key/value heads of width d_qk.
The **absorbed** form (what FlashMLA computes) never decompresses: since
q_n · (c W_UKᵀ) = (q_n W_UK) · c, each head's query becomes [q_n W_UK | q_r] (width r + d_r)
and every head attends to ONE key/value head, the cache itself [c | k_r]; the values are its
first r columns (c), and each head's output is mapped by its W_UV afterwards. Both give the
same weights and output (to rounding) with the same softmax scale (d_qk^-1/2, times YaRN's
mscale² where it applies), although the absorbed query is r + d_r wide.

Through the named points: hook_q, hook_k and hook_v hold the form's own q, k and v (in the
absorbed form the one latent head and its values); hook_attn_scores and hook_pattern are the
same in both, and hook_z is each head's output after W_UV (B, N, h, d_v) in both, so a hook
on it, or an ablation, means the same whichever form runs. ``generate`` decodes from a cache
of the latent rows [c | k_r] (one head), each new token in the absorbed form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.models._attend import attend_points
from attnlab.models._layers import linear, rms_norm
from attnlab.models._rope import rotate_pairs

__all__ = ["MLA", "MLA_FORMS"]

#: The two ways ``MLA`` computes the same attention.
MLA_FORMS = ("naive", "absorbed")

#: transformers builds q_a_layernorm and kv_a_layernorm with their default epsilon, not the
#: config's rms_norm_eps.
LATENT_EPS = 1e-6


def check_form(form) -> str:
    if form not in MLA_FORMS:
        raise AttnlabError(f"expected mla to be one of {MLA_FORMS}, but got {form!r} instead")
    return form


@dataclass
class MLA:
    """One layer's latent attention: its weights ``w`` (q_proj, or q_a_proj, q_a_norm and
    q_b_proj; kv_a_proj, kv_a_norm, kv_b_proj, o_proj; *_bias where the config has
    attention_bias), its sizes, softmax scale and rotary layout."""

    w: dict
    heads: int
    nope: int  # d_n
    rope: int  # d_r
    v_dim: int  # d_v
    rank: int  # r
    scale: float
    interleave: bool  # DeepSeek's rotary pairs are (x0, x1), (x2, x3), ... in the weights

    def _rotated(self, x: np.ndarray, cos, sin) -> np.ndarray:
        if self.interleave:
            # Pairs stored side by side are regrouped as (evens | odds), the rotate-half layout,
            # and stay in that order after the turn (as transformers leaves them).
            x = np.concatenate([x[..., 0::2], x[..., 1::2]], -1)  # (..., N, d_r)
        return rotate_pairs(x, cos, sin)  # the rotate-half layout

    def _inputs(self, x: np.ndarray, cos, sin):
        """(q_n (B, h, N, d_n), q_r (B, h, N, d_r), c (B, N, r), k_r (B, 1, N, d_r))."""
        b, n, _ = x.shape
        w = self.w
        if "q_proj" in w:
            q = linear(x, w["q_proj"])  # (B, N, h · d_qk)
        else:
            q = rms_norm(linear(x, w["q_a_proj"], w.get("q_a_bias")), w["q_a_norm"], LATENT_EPS)
            q = linear(q, w["q_b_proj"])  # (B, N, r_q) -> (B, N, h · d_qk)
        q = q.reshape(b, n, self.heads, -1).transpose(0, 2, 1, 3)  # (B, h, N, d_qk)
        ckv = linear(x, w["kv_a_proj"], w.get("kv_a_bias"))  # (B, N, r + d_r)
        c = rms_norm(ckv[..., : self.rank], w["kv_a_norm"], LATENT_EPS)  # (B, N, r)
        k_r = ckv[:, None, :, self.rank :]  # (B, 1, N, d_r): one rotary key for all heads
        q_r = self._rotated(q[..., self.nope :], cos, sin)
        return q[..., : self.nope], q_r, c, self._rotated(k_r, cos, sin)

    def __call__(self, i: int, x, cos, sin, how):
        """(z (B, N, h, d_v) after hook_z, LayerAttention) of x (B, N, d_model) in layer
        ``i``, through the named points of ``how`` (a ``Pass``); ``how.options["mla"]`` picks
        the form ("naive" by default, or "absorbed")."""
        b, n, _ = x.shape
        h = self.heads
        q_n, q_r, c, k_r = self._inputs(x, cos, sin)
        w_ukv = self.w["kv_b_proj"].reshape(h, self.nope + self.v_dim, self.rank)  # per head
        if how.kv is not None:
            return self._decode(i, q_n, q_r, c, k_r, w_ukv, how.kv), None
        form = check_form(how.options.get("mla", "naive"))
        common = dict(scale=self.scale, window=None, keys=how.keys, label=f"latent, {form}")
        if form == "naive":
            kv = linear(c, self.w["kv_b_proj"])  # (B, N, h · (d_n + d_v))
            kv = kv.reshape(b, n, h, -1).transpose(0, 2, 1, 3)  # (B, h, N, d_n + d_v)
            k_r = np.broadcast_to(k_r, (b, h, n, self.rope))  # the shared key, not copied
            k = np.concatenate([kv[..., : self.nope], k_r], -1)  # (B, h, N, d_qk)
            q = np.concatenate([q_n, q_r], -1)  # (B, h, N, d_qk)
            v, post = kv[..., self.nope :], None  # (B, h, N, d_v)
        else:
            q_lat = q_n @ w_ukv[:, : self.nope]  # (B, h, N, d_n) @ (h, d_n, r) -> (B, h, N, r)
            q = np.concatenate([q_lat, q_r], -1)  # (B, h, N, r + d_r)
            k = np.concatenate([c[:, None], k_r], -1)  # (B, 1, N, r + d_r): one kv head
            v = k[..., : self.rank]  # (B, 1, N, r): the latent itself
            w_uv = w_ukv[:, self.nope :].transpose(0, 2, 1)  # (h, r, d_v)

            def post(out):
                return out @ w_uv  # (B, h, N, r) -> (B, h, N, d_v)

        return attend_points(
            q, k, v, how.points, f"blocks.{i}.attn.", weights=how.weights, post=post, **common
        )

    def _decode(self, i, q_n, q_r, c, k_r, w_ukv, kv):
        """z (B, N, h, d_v) of new tokens against the latent cache: the absorbed form, as
        FlashMLA decodes. The cache row is [c | k_r] (one head, r + d_r wide); it is also
        passed as the values, and the output's first r columns are the latent average."""
        q = np.concatenate([q_n @ w_ukv[:, : self.nope], q_r], -1)  # (B, h, N, r + d_r)
        k = np.concatenate([c[:, None], k_r], -1)  # (B, 1, N, r + d_r)
        out = kv.attend(i, q, k, k, scale=self.scale)[..., : self.rank]  # (B, N, h, r)
        return np.einsum("bnhr,hvr->bnhv", out, w_ukv[:, self.nope :])  # (B, N, h, d_v)
