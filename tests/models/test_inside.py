"""The named points and hooks of ``attnlab.models`` without an oracle: names, bad hooks and
bad arguments, and that a hooked pattern or score table really changes what follows (checked
against the pattern · v computed here by hand). Tiny random GPT-2 from ``write_tiny_gpt2``."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.models import ablate, load, patch, write_tiny_gpt2
from attnlab.models.inside._points import names

IDS = np.array([[1, 5, 9, 2, 7, 3], [4, 4, 8, 1, 0, 6]])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = write_tiny_gpt2(tmp_path_factory.mktemp("tiny"), layers=2, d_model=16, heads=2)
    return load(folder, dtype="float64")


def test_cache_has_every_name_and_a_plain_run_keeps_none(model):
    run = model.run(IDS, cache=True)
    assert list(run.cache) == names(2, learned_positions=True)
    assert model.run(IDS).cache is None
    np.testing.assert_array_equal(run.logits, model.run(IDS).logits)


def test_hook_returning_none_keeps_the_value_and_sees_its_name(model):
    seen = []
    run = model.run(IDS, hooks={"blocks.1.hook_mlp_out": lambda v, name: seen.append(name)})
    assert seen == ["blocks.1.hook_mlp_out"]
    np.testing.assert_array_equal(run.logits, model.run(IDS).logits)


@pytest.mark.parametrize(
    ("hooks", "words"),
    [
        ({"blocks.0.attn.hook_zz": lambda v, n: None}, "close matches: blocks.0.attn.hook_z"),
        ({"blocks.0.hook_resid_pre": lambda v, n: v[:, :2]}, "'blocks.0.hook_resid_pre' to return an array of shape (2, 6, 16), but got shape (2, 2, 16)"),
        ({"blocks.1.hook_attn_out": lambda v, n: v * np.nan}, "'blocks.1.hook_attn_out' to return finite values"),
        ({"hook_embed": lambda v, n: 1 / 0}, "'hook_embed' to return a value, but it raised ZeroDivisionError"),
        ({"hook_embed": 3}, "'hook_embed' to be callable"),
        ({"hook_embed": lambda v, n: "text"}, "'hook_embed' to return an array"),
        ([("hook_embed", print)], "hooks to be a dict"),
    ],
)  # fmt: skip
def test_bad_hooks_are_one_error_naming_the_hook(model, hooks, words):
    with pytest.raises(AttnlabError, match=r"^expected") as err:
        model.run(IDS, hooks=hooks)
    assert words in str(err.value)


def test_hooked_pattern_flows_into_z(model):
    uniform = np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None]  # (N, N): each row averages

    run = model.run(
        IDS, cache=True, hooks={"blocks.0.attn.hook_pattern": lambda p, n: np.broadcast_to(uniform, p.shape)}
    )  # fmt: skip
    v = run.cache["blocks.0.attn.hook_v"]  # (B, N, h, d)
    by_hand = np.einsum("qk,bkhd->bqhd", uniform, v)
    np.testing.assert_allclose(run.cache["blocks.0.attn.hook_z"], by_hand, atol=1e-13)
    assert np.abs(run.logits - model.run(IDS).logits).max() > 1e-6


def test_hooked_scores_flow_through_the_softmax(model):
    plain = model.run(IDS, cache=True)
    same = model.run(IDS, hooks={"blocks.1.attn.hook_attn_scores": lambda s, n: s.copy()})
    np.testing.assert_allclose(same.logits, plain.logits, atol=1e-12)

    def block_first_key(s, name):
        s = s.copy()
        s[..., 1:, 0] = -np.inf  # no query but the first sees key 0
        return s

    run = model.run(IDS, cache=True, hooks={"blocks.1.attn.hook_attn_scores": block_first_key})
    scores = run.cache["blocks.1.attn.hook_attn_scores"]  # (B, h, N, N)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(
        run.cache["blocks.1.attn.hook_pattern"], e / e.sum(-1, keepdims=True), atol=1e-14
    )
    assert not run.cache["blocks.1.attn.hook_pattern"][..., 1:, 0].any()


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda m: ablate(m, IDS, [(2, 0)]), "0 <= layer < 2"),
        (lambda m: ablate(m, IDS, [(0, 0)], how="half"), "how to be one of"),
        (lambda m: ablate(m, IDS[:1], [(0, 0)], how="resample"), "at least 2 sequences"),
        (lambda m: patch(m, IDS, IDS, lambda x: 0.0, over="rows"), "over to be one of"),
        (lambda m: patch(m, IDS, IDS, lambda x: 0.0, over="heads", activation="mlp_out"), "activation='z'"),
        (lambda m: patch(m, IDS, IDS[:, :3], lambda x: 0.0), "clean and corrupt ids of one shape"),
        (lambda m: patch(m, IDS, IDS, lambda x: x[0]), "one real number"),
        (lambda m: m.run(IDS, attention_mask=[[1, 0]]), "attention_mask of 1 and 0"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_error(model, call, words):
    with pytest.raises(AttnlabError, match=r"^expected") as err:
        call(model)
    assert words in str(err.value)


def test_patching_clean_into_itself_changes_nothing(model):
    def metric(logits):
        return logits[0, -1, 3]

    base = metric(model.run(IDS).logits)
    for over, act in (("heads", "z"), ("positions", "resid_pre"), ("layers", "mlp_out")):
        table = patch(model, IDS, IDS, metric, over=over, activation=act)
        np.testing.assert_allclose(table, base, atol=1e-12)
    assert patch(model, IDS, IDS, metric, over="layers", activation="attn_out").shape == (2,)


def test_generation_runs_the_prompt_once_then_one_token_at_a_time(model, monkeypatch):
    seen = []
    forward = model.network.forward

    def spy(ids, how=None):
        seen.append((ids.shape[1], how.offset))
        return forward(ids, how)

    monkeypatch.setattr(model.network, "forward", spy)
    out = model.generate(IDS, 5)
    assert seen == [(6, 0), (1, 6), (1, 7), (1, 8), (1, 9)]  # no re-run of the prefix
    monkeypatch.undo()
    x = IDS
    for _ in range(5):  # greedy by hand: the argmax of a full run, token after token
        x = np.concatenate([x, model.run(x).logits[:, -1].argmax(-1)[:, None]], 1)
    np.testing.assert_array_equal(out, x)


def test_sampling_is_seeded_and_its_limits_reduce_to_greedy(model):
    greedy = model.generate(IDS, 6)
    one = model.generate(IDS, 6, temperature=1.0, top_k=1, seed=3)
    np.testing.assert_array_equal(one, greedy)
    tiny_p = model.generate(IDS, 6, temperature=0.7, top_p=1e-9, seed=4)
    np.testing.assert_array_equal(tiny_p, greedy)
    a = model.generate(IDS, 6, temperature=2.0, seed=5)
    np.testing.assert_array_equal(a, model.generate(IDS, 6, temperature=2.0, seed=5))
    assert a.shape == (2, 12) and (a[:, :6] == IDS).all()


def test_stop_ends_every_sequence(model):
    greedy = model.generate(IDS[:1], 6)
    stop = int(greedy[0, 8])  # the third new token
    out = model.generate(IDS[:1], 6, stop=stop)
    first = 6 + list(greedy[0, 6:]).index(stop)
    np.testing.assert_array_equal(out, greedy[:, : first + 1])
    assert model.generate(IDS, 0).shape == IDS.shape


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(max_new_tokens=-1), "max_new_tokens >= 0"),
        (dict(max_new_tokens=2.5), "max_new_tokens to be an integer"),
        (dict(max_new_tokens=2, temperature=-1.0), "temperature >= 0"),
        (dict(max_new_tokens=2, top_k=0), "top_k to be None or an integer >= 1"),
        (dict(max_new_tokens=2, top_p=1.5), "top_p to be None or a number in (0, 1]"),
        (dict(max_new_tokens=2, stop=[99]), "stop to be a token id"),
        (dict(max_new_tokens=10_000), "learned positions"),
    ],
)  # fmt: skip
def test_bad_generation_arguments(model, kwargs, words):
    with pytest.raises(AttnlabError, match=r"^expected") as err:
        model.generate(IDS, **kwargs)
    assert words in str(err.value)


def test_a_hook_writing_in_place_leaves_the_weights_alone(model):
    before = model.run(IDS).logits

    def scribble(value, name):
        value[...] = 0  # in place, returning None

    model.run(IDS, hooks={"hook_pos_embed": scribble, "hook_embed": scribble})
    np.testing.assert_array_equal(model.run(IDS).logits, before)
