"""Knocking heads out: ``ablate`` on the model's forward methods, against a forward pass written
out here in plain numpy from the model's parameters, and on the shipped induction model."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.transformer import TinyTransformer, pretrained


def _by_hand(model: TinyTransformer, tokens: np.ndarray, off=(), mean=False) -> np.ndarray:
    """Logits (B, N, V) of an attention-only causal model with learned positions, each head's
    output rows zeroed (or replaced by their mean over B and N) for the (layer, head) in off."""
    p, cfg = model.params, model.config
    n = tokens.shape[1]
    h = cfg["heads"]
    e = cfg["d_model"] // h
    x = p["embed"][tokens] + p["positions"][:n]  # (B, N, D)
    future = np.triu(np.ones((n, n), bool), 1)  # keys after the query
    for layer in range(cfg["layers"]):
        outputs = []
        for head in range(h):
            q = x @ p[f"layer{layer}.w_q"][head]  # (B, N, e)
            k = x @ p[f"layer{layer}.w_k"][head]
            v = x @ p[f"layer{layer}.w_v"][head]
            s = q @ k.transpose(0, 2, 1) / np.sqrt(e)  # (B, N, N)
            s = np.where(future, -np.inf, s)
            w = np.exp(s - s.max(axis=-1, keepdims=True))
            o = (w / w.sum(axis=-1, keepdims=True)) @ v  # (B, N, e)
            if (layer, head) in off:
                o = np.broadcast_to(o.mean(axis=(0, 1)), o.shape) if mean else np.zeros_like(o)
            outputs.append(o)
        x = x + np.concatenate(outputs, axis=-1) @ p[f"layer{layer}.w_o"]
    return x @ p["unembed"]


@pytest.fixture(scope="module")
def small():
    return TinyTransformer(vocab_size=11, context=9, layers=2, heads=3, d_model=12,
                           dtype=np.float64, seed=4)  # fmt: skip


@pytest.fixture(scope="module")
def tokens():
    return np.random.default_rng(2).integers(0, 11, size=(5, 9))


def test_ablating_nothing_is_the_plain_call_bitwise(small, tokens):
    assert np.array_equal(small.logits(tokens, ablate=()), small.logits(tokens))
    assert np.array_equal(small.predict(tokens, ablate=[]), small.predict(tokens))
    assert np.array_equal(small.attention_weights(tokens, ablate=()),
                          small.attention_weights(tokens))  # fmt: skip


def test_the_plain_forward_matches_the_one_written_here(small, tokens):
    np.testing.assert_allclose(small.logits(tokens), _by_hand(small, tokens), atol=1e-10)


@pytest.mark.parametrize("off", [[(0, 1)], [(1, 2)], [(0, 0), (1, 1)], [(0, 0), (0, 1), (0, 2)]])
@pytest.mark.parametrize("mean", [False, True])
def test_an_ablated_head_is_its_output_rows_replaced(small, tokens, off, mean):
    got = small.logits(tokens, ablate=off, ablation="mean" if mean else "zero")
    np.testing.assert_allclose(got, _by_hand(small, tokens, off, mean), atol=1e-10)
    # and it is a change: the oracle without the ablation is far from it
    assert np.abs(got - _by_hand(small, tokens)).max() > 1e-3


def test_ablating_layer_0_changes_layer_1_weights_not_layer_0s(small, tokens):
    plain = small.attention_weights(tokens)
    knocked = small.attention_weights(tokens, ablate=[(0, 1)])
    assert np.array_equal(knocked[:, 0], plain[:, 0])
    assert np.abs(knocked[:, 1] - plain[:, 1]).max() > 1e-6


def test_the_loss_with_ablation_is_the_cross_entropy_of_the_by_hand_logits(small, tokens):
    targets = np.roll(tokens, -1, axis=1)
    targets[:, -1] = -1
    logits = _by_hand(small, tokens, [(1, 0)])  # (B, N, V)
    logp = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    b, n = np.nonzero(targets >= 0)
    expected = -logp[b, n, targets[b, n]].mean()
    assert small.loss(tokens, targets, ablate=[(1, 0)]) == pytest.approx(expected, rel=1e-12)
    plain, _ = small.loss_and_grads(tokens, targets)
    assert small.loss(tokens, targets) == pytest.approx(plain, rel=1e-12)
    per = small.token_losses(tokens, targets)
    assert np.isnan(per[:, -1]).all() and np.nanmean(per) == pytest.approx(plain, rel=1e-12)


@pytest.mark.parametrize(
    ("ablate", "words"),
    [([(2, 0)], r"\(2, 0\)"), ([(0, 3)], r"\(0, 3\)"), ([(-1, 0)], r"\(-1, 0\)"),
     ([(0,)], "pair"), ([(0.5, 1)], "integers"), (3, "pairs"), ([(True, 0)], "integers")],
)  # fmt: skip
def test_a_bad_head_is_an_error_naming_it(small, tokens, ablate, words):
    with pytest.raises(AttnlabError, match=words):
        small.predict(tokens, ablate=ablate)
    with pytest.raises(AttnlabError, match=words):
        small.loss(tokens, tokens, ablate=ablate)


def test_an_unknown_ablation_is_an_error(small, tokens):
    with pytest.raises(AttnlabError, match="ablation"):
        small.logits(tokens, ablate=[(0, 0)], ablation="resample")


def _repeats(seed: int, count: int, n: int, v: int):
    """Random prefix, T tokens, the same T tokens (T uniform over 4 … n // 2), and the mask of
    the positions whose next token is a copy."""
    rng = np.random.default_rng(seed + 999)
    rows, counted = [], np.zeros((count, n - 1), bool)
    for s in range(count):
        t = int(rng.integers(4, n // 2 + 1))
        segment = list(rng.integers(0, v, t))
        rows.append(list(rng.integers(0, v, n - 2 * t)) + segment + segment)
        counted[s, n - t : n - 1] = True
    return np.array(rows), counted


def test_knocking_out_the_previous_token_head_breaks_copying():
    model = pretrained("induction")
    cfg = model.config
    tokens, counted = _repeats(3, 400, cfg["context"], cfg["vocab_size"])

    def accuracy(ablate):
        return (model.predict(tokens, ablate=ablate)[:, :-1] == tokens[:, 1:])[counted].mean()

    plain = accuracy(())
    # The head that looks at the previous token, found from its weights, not assumed.
    w = model.attention_weights(tokens)[:, 0]  # (B, h, N, N)
    n = tokens.shape[1]
    previous = w[:, :, np.arange(1, n), np.arange(n - 1)].mean(axis=(0, 2))  # (h,)
    head = int(previous.argmax())
    others = [h for h in range(cfg["heads"]) if previous[h] < 0.3]
    assert plain > 0.9 and others
    assert accuracy([(0, head)]) < plain - 0.3  # measured: 0.970 -> 0.404
    # a weak layer-0 head matters far less than the previous-token head does
    assert all(accuracy([(0, h)]) > accuracy([(0, head)]) + 0.2 for h in others)
