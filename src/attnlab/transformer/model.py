"""``TinyTransformer``: a decoder (or encoder) small enough to train in seconds on a CPU, whose
every gradient is exact and whose attention is attnlab's own.

The forward pass, in order (shape legend: B sequences, N ≤ context positions, D = d_model,
h heads, V the vocabulary):

    1) embed      x = embed[tokens] (+ positions[:N])                       (B, N, D)
    2) layers     x = x + W^O concat_h attention(x W^Q_h, x W^K_h, x W^V_h)  (B, N, D)
                  (+ x = x + MLP(LayerNorm(x)) with ``mlp=True``, pre-norm as GPT-2)
    3) unembed    logits = x unembed  (after a final layer norm with the MLP)  (B, N, V)
    4) loss       mean cross-entropy over the positions whose target is not -1

``loss_and_grads`` runs the chain rule back through the same steps (``_blocks``, ``_ops``);
attention's part of it is ``attnlab.attention_backward``. The tests compare every gradient with
central finite differences and with torch autograd on the same weights.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass

import numpy as np

from attnlab import logsumexp, masks
from attnlab.errors import AttnlabError, ShapeError
from attnlab.positions import sinusoidal
from attnlab.transformer import _files
from attnlab.transformer._ablation import heads_off
from attnlab.transformer._blocks import attend, attend_backward, mlp, mlp_backward
from attnlab.transformer._config import check_config, dtype_of, initial_params, shapes
from attnlab.transformer._ops import cross_entropy, layer_norm, layer_norm_backward

__all__ = ["AttentionCall", "TinyTransformer"]

_CONFIG_KEY = _files.CONFIG_KEY  # the npz entry holding the configuration as JSON


@dataclass(frozen=True)
class AttentionCall:
    """One layer's call of ``attnlab.attention`` in a training step, as the model made it.

    q, k, v (B, h, N, e) and grad_output (B, h, N, e) = ∂L/∂output, with the mask and scale
    used: ``attnlab.trace_attention(q, k, v, mask, scale=scale, grad_output=grad_output)``
    gives that layer's weights and the gradient at its scores.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    grad_output: np.ndarray
    mask: object
    scale: float | None


class TinyTransformer:
    """A small transformer whose attention forward and backward are attnlab's own.

    Args (keyword-only):
        vocab_size: V, tokens are 0 … V-1.
        context: the longest sequence the model takes (learned positions have this many rows).
        layers, heads, d_model: L layers of h heads of width d_model / h.
        mlp: add a GELU MLP of width 4·d_model and pre-norm layer norms (GPT-2's block);
            without it the model is attention-only, with no layer norm.
        positions: "learned" (a trained table), "sinusoidal" (``attnlab.positions``, fixed)
            or None (no order information at all: §6.5's permutation argument applies).
        causal: each position sees itself and the positions before it (a decoder);
            False: every position sees every other (an encoder).
        scaled: scores times 1/√(d_model / h) (§6.3); False: unscaled (``scale=1.0``).
        dtype: float32 or float64, of the parameters and every computation.
        seed: the initial parameters' seed. init_std: see ``_config`` (None: fan-in scaling).

    >>> m = TinyTransformer(vocab_size=8, context=6, layers=1, heads=2, d_model=8)
    >>> m.attention_weights(np.array([[1, 2, 3]])).shape
    (1, 1, 2, 3, 3)
    """

    def __init__(self, *, vocab_size: int, context: int, layers: int, heads: int,
                 d_model: int, mlp: bool = False, positions: str | None = "learned",
                 causal: bool = True, scaled: bool = True, dtype=np.float32, seed: int = 0,
                 init_std: float | None = None):  # fmt: skip
        self.config = check_config(vocab_size=vocab_size, context=context, layers=layers,
                                   heads=heads, d_model=d_model, mlp=mlp, positions=positions,
                                   causal=causal, scaled=scaled, dtype=dtype, seed=seed,
                                   init_std=init_std)  # fmt: skip
        self.params: dict[str, np.ndarray] = initial_params(self.config)
        self._dtype = dtype_of(self.config)
        self._mask = masks.Causal() if causal else None
        self._scale = None if scaled else 1.0  # None: attnlab's 1/√d_k
        self._table = None  # the sinusoidal table, made once
        if positions == "sinusoidal":
            self._table = sinusoidal(context, d_model).astype(self._dtype)  # (context, D)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"TinyTransformer({args})"

    # -- input checks ---------------------------------------------------------------------------

    def _tokens(self, tokens, name: str = "tokens") -> np.ndarray:
        try:
            array = np.asarray(tokens)
        except ValueError:  # ragged rows
            raise ShapeError(f"expected {name} of shape (B, N), rows of one length, but got "
                             "rows of different lengths") from None  # fmt: skip
        if array.dtype.kind not in "iu" and array.size:
            raise AttnlabError(f"expected {name} to be integers, but got dtype {array.dtype}")
        if array.ndim != 2 or not array.shape[0] or not array.shape[1]:
            raise ShapeError(f"expected {name} of shape (B, N) with B ≥ 1 and 1 ≤ N ≤ "
                             f"{self.config['context']}, but got {array.shape} instead")  # fmt: skip
        if array.shape[1] > self.config["context"]:
            raise ShapeError(f"expected at most context={self.config['context']} positions in "
                             f"{name}, but got {array.shape[1]} instead")  # fmt: skip
        low = -1 if name == "targets" else 0
        bad = (array < low) | (array >= self.config["vocab_size"])
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            allowed = "-1 (not counted) or " if low < 0 else ""
            raise AttnlabError(f"expected {name} entries {allowed}in 0 … "
                               f"{self.config['vocab_size'] - 1}, but got {array[row, col]} "
                               f"at row {row}, position {col} instead")  # fmt: skip
        return array.astype(np.intp)

    # -- forward and backward -------------------------------------------------------------------

    def _forward(self, tokens: np.ndarray, *, weights: bool = False, off=None, mean=False):
        """tokens (B, N) -> (final hidden states (B, N, D), caches, weights per layer).

        ``off``: {layer: heads} knocked out (``_ablation.heads_off``), ``mean`` how."""
        p, n = self.params, tokens.shape[1]
        x = p["embed"][tokens]  # (B, N, D)
        if self._table is not None:
            x = x + self._table[:n]  # (B, N, D)
        elif "positions" in p:
            x = x + p["positions"][:n]  # (B, N, D)
        caches, seen = [], []
        for layer in range(self.config["layers"]):
            pre = f"layer{layer}."
            knocked = {"off": off[layer], "mean": mean} if off and layer in off else {}
            x, cache, *w = attend(x, p, pre, self._mask, self._scale, weights=weights,
                                  **knocked)  # fmt: skip
            seen += w
            mlp_cache = None
            if self.config["mlp"]:
                x, mlp_cache = mlp(x, p, pre)
            caches.append((cache, mlp_cache))
        final = None
        if self.config["mlp"]:
            x, final = layer_norm(x, p["norm.gain"], p["norm.bias"])
        return x, (caches, final), seen  # x (B, N, D): what the unembedding reads

    def _backward(self, tokens, last, counted, dlogits, state, calls=None) -> dict:
        """Every parameter's gradient for dlogits = ∂L/∂logits (K, V) of the counted rows."""
        caches, final = state
        p, grads = self.params, {}
        b, n, d = last.shape
        grads["unembed"] = last[counted].T @ dlogits  # (D, V)
        dx = np.zeros_like(last)  # (B, N, D): positions not counted get no gradient here
        dx[counted] = dlogits @ p["unembed"].T  # (K, D)
        if final is not None:
            dx, grads["norm.gain"], grads["norm.bias"] = layer_norm_backward(dx, final)
        for layer in reversed(range(self.config["layers"])):
            pre = f"layer{layer}."
            cache, mlp_cache = caches[layer]
            if mlp_cache is not None:
                dx = mlp_backward(dx, p, pre, mlp_cache, grads)
            dx, do = attend_backward(dx, p, pre, self._mask, self._scale, cache, grads)
            if calls is not None:
                calls.insert(0, self._call(cache, do))
        onehot = np.zeros((b * n, self.config["vocab_size"]), dx.dtype)  # (R, V)
        onehot[np.arange(b * n), tokens.reshape(-1)] = 1
        grads["embed"] = onehot.T @ dx.reshape(b * n, d)  # (V, D): each token's rows summed
        if "positions" in p:
            grads["positions"] = np.zeros_like(p["positions"])  # (context, D)
            grads["positions"][:n] = dx.sum(axis=0)  # (N, D)
        return {name: grads[name].astype(self._dtype, copy=False) for name in p}

    def _call(self, cache, grad_output) -> AttentionCall:
        _, _, q, k, v, *_ = cache
        return AttentionCall(q, k, v, grad_output, self._mask, self._scale)

    def loss_and_grads(self, tokens, targets) -> tuple[float, dict[str, np.ndarray]]:
        """Mean next-token cross-entropy and its exact gradient for every parameter.

        Args:
            tokens: (B, N) token ids, N ≤ context.
            targets: (B, N) the token each position should output, -1 where not counted
                (at least one position must count).

        Returns:
            (loss, grads): grads has the keys of ``params``, each of its parameter's shape.
        """
        loss, grads, _ = self._step(tokens, targets, record=False)
        return loss, grads

    def attention_calls(self, tokens, targets) -> tuple[float, dict, list[AttentionCall]]:
        """``loss_and_grads`` plus each layer's ``AttentionCall`` (for the saturation numbers)."""
        return self._step(tokens, targets, record=True)

    def _step(self, tokens, targets, *, record: bool):
        tokens = self._tokens(tokens)
        targets = self._tokens(targets, "targets")
        if targets.shape != tokens.shape:
            raise ShapeError(f"expected targets of the tokens' shape {tokens.shape}, but got "
                             f"{targets.shape} instead")  # fmt: skip
        if not (targets >= 0).any():
            raise AttnlabError("expected at least one target that is not -1, but got none")
        last, state, _ = self._forward(tokens)
        counted = targets >= 0  # (B, N)
        # Only counted positions reach the loss, so only they are unembedded (K rows).
        loss, dlogits = cross_entropy(last[counted] @ self.params["unembed"], targets[counted])
        calls = [] if record else None
        return loss, self._backward(tokens, last, counted, dlogits, state, calls), calls

    def logits(self, tokens, *, ablate=(), ablation: str = "zero") -> np.ndarray:
        """(B, N, V): the scores of each position's next token.

        ``ablate``: (layer, head) pairs whose output is knocked out, by ``ablation`` "zero"
        (their output rows zeroed) or "mean" (each row their mean output over this batch's
        sequences and positions); see ``transformer/_ablation.py``. The same argument is taken
        by ``predict``, ``attention_weights`` and ``loss``.
        """
        off = heads_off(self.config, ablate, ablation)
        last = self._forward(self._tokens(tokens), off=off, mean=ablation == "mean")[0]
        return last @ self.params["unembed"]  # (B, N, V)

    def predict(self, tokens, *, ablate=(), ablation: str = "zero") -> np.ndarray:
        """(B, N): each position's most likely next token."""
        return self.logits(tokens, ablate=ablate, ablation=ablation).argmax(axis=-1)

    def attention_weights(self, tokens, *, ablate=(), ablation: str = "zero") -> np.ndarray:
        """(B, layers, heads, N, N): every head's softmax weights, query rows, key columns.

        An ablated head still has weights (its scores are computed as before); knocking it out
        changes the weights of the layers after it."""
        off = heads_off(self.config, ablate, ablation)
        tokens = self._tokens(tokens)
        _, _, seen = self._forward(tokens, weights=True, off=off, mean=ablation == "mean")
        return np.stack(seen, axis=1)  # (B, L, h, N, N)

    def token_losses(self, tokens, targets, *, ablate=(), ablation: str = "zero") -> np.ndarray:
        """(B, N): each position's cross-entropy −log p(target) in nats, NaN where the target
        is -1 (not counted)."""
        tokens = self._tokens(tokens)
        targets = self._tokens(targets, "targets")
        if targets.shape != tokens.shape:
            raise ShapeError(f"expected targets of the tokens' shape {tokens.shape}, but got "
                             f"{targets.shape} instead")  # fmt: skip
        logits = self.logits(tokens, ablate=ablate, ablation=ablation)  # (B, N, V)
        picked = np.take_along_axis(logits, np.maximum(targets, 0)[..., None], axis=-1)[..., 0]
        nll = (logsumexp(logits, axis=-1) - picked).astype(float)  # (B, N)
        return np.where(targets >= 0, nll, np.nan)

    def loss(self, tokens, targets, *, ablate=(), ablation: str = "zero") -> float:
        """The mean cross-entropy ``loss_and_grads`` reports, without gradients, optionally
        with heads knocked out (``ablate``, as in ``logits``)."""
        nll = self.token_losses(tokens, targets, ablate=ablate, ablation=ablation)
        if np.isnan(nll).all():
            raise AttnlabError("expected at least one target that is not -1, but got none")
        return float(np.nanmean(nll))

    # -- files ----------------------------------------------------------------------------------

    def save(self, path, extra: dict[str, np.ndarray] | None = None) -> None:
        """Write the configuration and every parameter to an .npz file (and ``extra`` arrays,
        under names of their own, which ``load`` ignores), atomically (``_files.write``)."""
        entries = {_CONFIG_KEY: np.array(json.dumps(self.config))} | self.params | (extra or {})
        try:
            _files.write(path, entries)
        except OSError as exc:
            raise AttnlabError(f"cannot write the model to {_files.shown(path)} "
                               f"({exc.strerror or exc})") from None  # fmt: skip

    @classmethod
    def load(cls, path) -> TinyTransformer:
        """A model from a file ``save`` wrote: the same configuration and the same numbers.
        A file that is not one is an AttnlabError naming it and what is wrong."""

        def names(config: dict):
            return shapes(check_config(**config))  # refuses a config too big before reading

        config, arrays = _files.read(path, inspect.signature(cls.__init__), names)
        return cls.from_arrays(config, arrays, where=_files.shown(path))

    @classmethod
    def from_arrays(cls, config: dict, arrays: dict, where: str = "arrays") -> TinyTransformer:
        """A model of ``config`` holding ``arrays`` (name -> array; other names are ignored),
        each a real float array of its parameter's shape, finite in the model's dtype."""
        model = cls(**config)
        dtype = dtype_of(model.config)
        for name, shape in shapes(model.config).items():
            if name not in arrays or np.shape(arrays[name]) != shape:
                got = np.shape(arrays[name]) if name in arrays else "nothing"
                raise ShapeError(f"expected parameter {name} of shape {shape}, but got {got}")
            model.params[name][...] = _files.checked_weight(name, arrays[name], dtype, where)
        return model
