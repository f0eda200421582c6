"""The tiny transformer: exact gradients (finite differences and torch autograd), files, seeds,
errors.

The finite differences use the central five-point stencil (error O(h⁴)), so float64 agrees
with the analytic gradient to far better than the 1e-6 relative asked of it even at small
entries. The torch oracle rebuilds the same network from the same arrays in torch ops
(``_torch_loss``), written from the model's documented equations and not from its code.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError, ShapeError
from attnlab.transformer import Adam, TinyTransformer

FD_STEP = 1e-3
FD_REL = 1e-6
TORCH_ATOL = 1e-9

CONFIGS = {
    "attention-only": dict(layers=2, heads=2, d_model=8, positions="learned"),
    "mlp-and-norms": dict(layers=2, heads=2, d_model=8, mlp=True, positions="learned"),
    "sinusoidal-unscaled": dict(layers=1, heads=4, d_model=8, positions="sinusoidal",
                                scaled=False),
    "encoder-no-positions": dict(layers=2, heads=1, d_model=6, positions=None, causal=False,
                                 mlp=True),
}  # fmt: skip


def _model(name: str, **extra) -> TinyTransformer:
    kwargs = dict(vocab_size=7, context=6, dtype=np.float64, seed=3) | CONFIGS[name] | extra
    return TinyTransformer(**kwargs)


def _batch(seed: int = 0, n: int = 5):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 7, (3, n))
    targets = rng.integers(-1, 7, (3, n))  # some positions not counted
    targets[0, 0] = 2
    return tokens, targets


def _fd(model, tokens, targets, name, idx) -> float:
    p = model.params[name]
    old = p[idx]
    values = []
    for step in (2, 1, -1, -2):
        p[idx] = old + step * FD_STEP
        values.append(model.loss_and_grads(tokens, targets)[0])
    p[idx] = old
    f2, f1, m1, m2 = values
    return (8 * (f1 - m1) - (f2 - m2)) / (12 * FD_STEP)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_finite_differences_agree_on_every_parameter(config):
    model = _model(config)
    tokens, targets = _batch()
    _, grads = model.loss_and_grads(tokens, targets)
    rng = np.random.default_rng(7)
    for name, p in model.params.items():
        scale = np.abs(grads[name]).max()
        for _ in range(4):
            idx = tuple(int(rng.integers(0, s)) for s in p.shape)
            fd, exact = _fd(model, tokens, targets, name, idx), grads[name][idx]
            # Relative to the entry itself, floored far below the parameter's largest entry.
            denominator = max(abs(fd), abs(exact), 1e-6 * scale, 1e-12)
            assert abs(fd - exact) <= FD_REL * denominator, (name, idx, fd, exact)


def test_the_finite_difference_check_can_fail():
    model = _model("mlp-and-norms")
    tokens, targets = _batch()
    _, grads = model.loss_and_grads(tokens, targets)
    idx = (1, 2, 3)
    fd = _fd(model, tokens, targets, "layer0.w_k", idx)
    assert abs(fd - 1.01 * grads["layer0.w_k"][idx]) > FD_REL * abs(fd)  # a 1% error shows


def _torch_loss(torch, model: TinyTransformer, params: dict, tokens, targets):
    """The model's documented forward pass, in torch ops, from ``params`` (torch tensors)."""
    cfg = model.config
    f = torch.nn.functional
    tokens = torch.as_tensor(tokens)
    b, n = tokens.shape
    x = params["embed"][tokens]
    if cfg["positions"] == "learned":
        x = x + params["positions"][:n]
    elif cfg["positions"] == "sinusoidal":
        pos = torch.arange(n, dtype=torch.float64)[:, None]
        i = torch.arange(0, cfg["d_model"], 2, dtype=torch.float64)
        table = torch.zeros(n, cfg["d_model"], dtype=torch.float64)
        table[:, 0::2] = torch.sin(pos / 10000 ** (i / cfg["d_model"]))
        table[:, 1::2] = torch.cos(pos / 10000 ** (i / cfg["d_model"]))[:, : cfg["d_model"] // 2]
        x = x + table
    d, h = cfg["d_model"], cfg["heads"]
    e = d // h
    scale = 1 / e**0.5 if cfg["scaled"] else 1.0
    allowed = torch.tril(torch.ones(n, n, dtype=torch.bool)) if cfg["causal"] else None

    def norm(z, key):
        return f.layer_norm(z, (d,), params[key + ".gain"], params[key + ".bias"], eps=1e-5)

    for layer in range(cfg["layers"]):
        pre = f"layer{layer}."
        a = norm(x, pre + "norm1") if cfg["mlp"] else x
        heads = []
        for j in range(h):
            q, k, v = (a @ params[pre + w][j] for w in ("w_q", "w_k", "w_v"))
            s = q @ k.transpose(-1, -2) * scale
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            heads.append(torch.softmax(s, dim=-1) @ v)
        x = x + torch.cat(heads, dim=-1) @ params[pre + "w_o"]
        if cfg["mlp"]:
            m = norm(x, pre + "norm2") @ params[pre + "mlp.w_in"] + params[pre + "mlp.b_in"]
            x = x + f.gelu(m, approximate="tanh") @ params[pre + "mlp.w_out"]
            x = x + params[pre + "mlp.b_out"]
    if cfg["mlp"]:
        x = norm(x, "norm")
    logits = x @ params["unembed"]
    return f.cross_entropy(logits.reshape(b * n, -1), torch.as_tensor(targets).reshape(-1),
                           ignore_index=-1)  # fmt: skip


@pytest.mark.oracle
@pytest.mark.parametrize("config", list(CONFIGS))
def test_every_gradient_matches_torch_autograd(torch, config):
    model = _model(config)
    tokens, targets = _batch(1)
    loss, grads = model.loss_and_grads(tokens, targets)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in model.params.items()}
    expected = _torch_loss(torch, model, params, tokens, targets)
    expected.backward()
    assert abs(loss - expected.item()) < TORCH_ATOL
    for name, p in params.items():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=0, atol=TORCH_ATOL,
                                   err_msg=name)  # fmt: skip


@pytest.mark.oracle
def test_the_torch_oracle_can_fail(torch):
    model = _model("attention-only", scaled=False)
    tokens, targets = _batch(1)
    _, grads = model.loss_and_grads(tokens, targets)
    model.config["scaled"] = True  # the oracle now scales where the model did not
    params = {k: torch.tensor(v, requires_grad=True) for k, v in model.params.items()}
    _torch_loss(torch, model, params, tokens, targets).backward()
    assert np.abs(grads["layer0.w_q"] - params["layer0.w_q"].grad.numpy()).max() > 1e-3


def test_attention_weights_are_softmax_rows_and_causal():
    model = _model("mlp-and-norms")
    w = model.attention_weights(_batch()[0])
    assert w.shape == (3, 2, 2, 5, 5)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-12)
    assert np.all(np.triu(w, k=1) == 0)  # no weight on a later key
    encoder = _model("encoder-no-positions")
    assert np.all(encoder.attention_weights(_batch()[0])[..., 0, 4] > 0)


def test_without_positions_an_encoder_is_permutation_equivariant():
    model = _model("encoder-no-positions")
    tokens = np.array([[1, 2, 3, 4, 5]])
    order = np.array([4, 0, 3, 1, 2])
    np.testing.assert_allclose(model.logits(tokens)[:, order], model.logits(tokens[:, order]),
                               atol=1e-12)  # fmt: skip
    learned = _model("encoder-no-positions", positions="learned")
    assert not np.allclose(learned.logits(tokens)[:, order], learned.logits(tokens[:, order]))


def test_save_and_load_round_trip(tmp_path):
    model = _model("mlp-and-norms", init_std=0.5)
    model.params["embed"][0, 0] = 42.0  # a trained-looking change survives the trip
    model.save(tmp_path / "m.npz")
    back = TinyTransformer.load(tmp_path / "m.npz")
    assert back.config == model.config
    assert set(back.params) == set(model.params)
    for name in model.params:
        np.testing.assert_array_equal(back.params[name], model.params[name])
        assert back.params[name].dtype == np.float64
    tokens, _ = _batch()
    np.testing.assert_array_equal(back.logits(tokens), model.logits(tokens))


def test_same_seed_same_model_other_seed_other_model():
    a, b, c = (TinyTransformer(vocab_size=9, context=8, layers=2, heads=2, d_model=8, seed=s)
               for s in (5, 5, 6))  # fmt: skip
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert not np.array_equal(a.params["layer0.w_q"], c.params["layer0.w_q"])
    assert a.params["embed"].dtype == np.float32


def test_adam_training_lowers_the_loss_and_is_deterministic():
    def run():
        model = _model("attention-only", dtype=np.float32)
        opt = Adam(model.params, lr=1e-2)
        tokens = np.tile(np.arange(6) % 7, (4, 1))
        targets = np.roll(tokens, -1, axis=1)
        losses = []
        for _ in range(30):
            loss, grads = model.loss_and_grads(tokens, targets)
            opt.step(grads)
            losses.append(loss)
        return losses

    first, second = run(), run()
    assert first == second
    assert first[-1] < 0.5 * first[0]


def test_init_std_sets_the_spread():
    model = TinyTransformer(vocab_size=64, context=8, layers=1, heads=1, d_model=64,
                            init_std=0.02)  # fmt: skip
    assert 0.018 < model.params["layer0.w_q"].std() < 0.022


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"d_model": 10, "heads": 3}, AttnlabError, "divisible by heads"),
        ({"positions": "rotary"}, AttnlabError, "positions"),
        ({"dtype": np.int32}, AttnlabError, "dtype"),
        ({"layers": 0}, AttnlabError, "layers"),
        ({"vocab_size": 2.5}, AttnlabError, "vocab_size"),
        ({"mlp": "yes"}, AttnlabError, "mlp"),
        ({"init_std": -1.0}, AttnlabError, "init_std"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs, error, words):
    args = dict(vocab_size=8, context=4, layers=1, heads=2, d_model=8) | kwargs
    with pytest.raises(error, match=words):
        TinyTransformer(**args)


def test_token_errors_name_what_is_wrong():
    model = TinyTransformer(vocab_size=8, context=4, layers=1, heads=2, d_model=8)
    with pytest.raises(ShapeError, match="context=4"):
        model.predict(np.zeros((1, 5), int))
    with pytest.raises(ShapeError, match=r"\(B, N\)"):
        model.predict(np.zeros(3, int))
    with pytest.raises(AttnlabError, match="row 0, position 2"):
        model.predict([[1, 2, 8]])
    with pytest.raises(AttnlabError, match="integers"):
        model.predict([[1.5, 2.0]])
    with pytest.raises(ShapeError, match="targets"):
        model.loss_and_grads([[1, 2]], [[1, 2, 3]])
    with pytest.raises(AttnlabError, match="not -1"):
        model.loss_and_grads([[1, 2]], [[-1, -1]])
    with pytest.raises(ShapeError, match=r"layer0\.w_q"):
        TinyTransformer.from_arrays(model.config, {**model.params, "layer0.w_q": np.zeros(2)})
