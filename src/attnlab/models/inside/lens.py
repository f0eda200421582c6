"""The logit lens and logit attribution of one run.

Shape legend: B batch, N tokens, L layers, h query heads, d head width, d_model hidden width,
V vocabulary.

The logit lens reads layer l's residual stream (``blocks.{l}.hook_resid_post``) as if it were
the last: through the final norm (computed afresh on that residual) and the output head, with
the final softcap where the model has one. At the last layer it is the run's logits.

Attribution splits one logit (before a final softcap) into what each component wrote into the
residual stream at that position: the residual is the sum of ``embed``, ``pos_embed``, every
head's z_h · W_O[h] (``L{l}H{h}``), each layer's output bias (``L{l}.attn_bias``) and MLP
(``L{l}.mlp``). The final norm is linear once its scale is frozen at this run's value
(TransformerLens's convention), so each component's contribution is
frozen_norm(component) · W_U[token], and the parts add up to the logit:

    RMSNorm     frozen_norm(c) = c · w / rms(x)
    LayerNorm   frozen_norm(c) = (c - mean(c)) · w / std(x), plus the norm's bias as its own
                part (``ln_final.bias``): the mean is subtracted from each part, which is exact
                because centring is linear

where x is the final residual. Gemma 2's norm on the attention output is frozen the same way,
at that layer's attention output, so its heads still add up.
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError

__all__ = ["logit_attribution", "logit_difference", "logit_lens"]


def _cached(run) -> dict:
    """The run's cache, running it again with the cache (same ids, mask and hooks) if it has
    none."""
    if run.cache is None:
        again = run.model.run(
            run.ids, cache=True, hooks=run.hooks, attention_mask=run.keys, weights=False
        )
        run.cache = again.cache
    return run.cache


def _index(name: str, value, size: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise AttnlabError(f"expected {name} to be an integer, but got {value!r} instead")
    if not -size <= value < size:
        raise AttnlabError(f"expected -{size} <= {name} < {size}, but got {name}={value} instead")
    return int(value) % size


def logit_lens(run, layer: int) -> np.ndarray:
    """(B, N, V): layer ``layer``'s resid_post through the final norm and the output head."""
    net = run.model.network
    layer = _index("layer", layer, net.shape.layers)
    resid = _cached(run)[f"blocks.{layer}.hook_resid_post"]  # (B, N, d_model)
    return net.unembed(net.normalize_final(resid))  # (B, N, V)


def _parts(run, batch: int, position: int) -> dict[str, np.ndarray]:
    """Each component's vector (d_model,) in the final residual at (batch, position)."""
    net, cache = run.model.network, _cached(run)
    parts = {"embed": cache["hook_embed"][batch, position]}
    if "hook_pos_embed" in cache:
        parts["pos_embed"] = cache["hook_pos_embed"][0, position]
    for i in range(net.shape.layers):
        z = cache[f"blocks.{i}.attn.hook_z"][batch, position]  # (h, d)
        heads = np.einsum("hd,hdm->hm", z, net.out_weights(i))  # (h, d_model)
        bias = net.out_bias(i)
        scale = net.attn_out_norm(i)
        if scale is not None:  # Gemma 2: the norm frozen at this layer's attention output
            raw = heads.sum(0) + (0 if bias is None else bias)  # (d_model,)
            scale = scale / np.sqrt(np.mean(raw * raw) + net.eps)
            heads = heads * scale
            bias = None if bias is None else bias * scale
        for h, vec in enumerate(heads):
            parts[f"L{i}H{h}"] = vec
        if bias is not None:
            parts[f"L{i}.attn_bias"] = bias
        parts[f"L{i}.mlp"] = cache[f"blocks.{i}.hook_mlp_out"][batch, position]
    return parts


def _frozen(run, batch: int, position: int) -> dict[str, np.ndarray]:
    """Each part after the final norm with its scale frozen (d_model,), and the norm's bias."""
    net = run.model.network
    last = _cached(run)[f"blocks.{net.shape.layers - 1}.hook_resid_post"][batch, position]
    norm = net.final_norm_parts()
    parts = _parts(run, batch, position)
    if norm["kind"] == "rms":
        gain = norm["weight"] / np.sqrt(np.mean(last * last) + norm["eps"])  # (d_model,)
        return {k: v * gain for k, v in parts.items()}
    centred = last - last.mean()
    gain = norm["weight"] / np.sqrt(np.mean(centred * centred) + norm["eps"])
    out = {k: (v - v.mean()) * gain for k, v in parts.items()}
    out["ln_final.bias"] = norm["bias"]
    return out


def _check(run, position, batch):
    b, n = run.ids.shape
    return _index("batch", batch, b), _index("position", position, n)


def _token(run, name: str, token) -> int:
    return _index(name, token, run.model.shape.vocab)


def logit_attribution(run, position: int, token: int, batch: int = 0) -> dict[str, float]:
    """{component: its share of the logit of ``token`` at ``position``} (before a final
    softcap); the shares add up to that logit."""
    batch, position = _check(run, position, batch)
    u = run.model.network.lm_head[_token(run, "token", token)]  # (d_model,)
    return {k: float(v @ u) for k, v in _frozen(run, batch, position).items()}


def logit_difference(run, position: int, a: int, b: int, batch: int = 0) -> dict[str, float]:
    """{component: its share of logit[a] - logit[b] at ``position``}, as ``logit_attribution``."""
    batch, position = _check(run, position, batch)
    head = run.model.network.lm_head
    u = head[_token(run, "a", a)] - head[_token(run, "b", b)]  # (d_model,)
    return {k: float(v @ u) for k, v in _frozen(run, batch, position).items()}
