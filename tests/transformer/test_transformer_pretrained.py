"""The shipped induction model, checked the way an outsider would: sequences from a generator
written here from the task's definition, accuracy from ``predict``, and the heads found from
``attention_weights`` alone (no lab code is imported).
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.transformer import TinyTransformer, pretrained

PACKAGE_LIMIT = 1 << 20  # bytes: the weights ship inside the wheel


def _sequences(seed: int, count: int, n: int, v: int):
    """Random prefix, T tokens, the same T tokens; T uniform over 4 … n // 2 per sequence."""
    rng = np.random.Generator(np.random.PCG64(seed + 12345))
    rows, lengths = [], []
    for _ in range(count):
        t = int(rng.integers(4, n // 2 + 1))
        prefix = list(rng.integers(0, v, n - 2 * t))
        segment = list(rng.integers(0, v, t))
        rows.append(prefix + segment + segment)
        lengths.append(t)
    return np.array(rows), lengths


@pytest.fixture(scope="module")
def shipped():
    return pretrained("induction")


@pytest.fixture(scope="module")
def fresh(shipped):
    cfg = shipped.config
    return _sequences(7, 400, cfg["context"], cfg["vocab_size"])


def test_the_shipped_model_is_small_and_attention_only(shipped):
    from importlib import resources

    size = (resources.files("attnlab.transformer") / "induction.npz").stat().st_size
    assert size < PACKAGE_LIMIT
    cfg = shipped.config
    assert cfg["layers"] == 2 and cfg["mlp"] is False and cfg["causal"] is True
    assert cfg["context"] >= 32 and cfg["vocab_size"] >= 32


def test_it_copies_the_second_copy(shipped, fresh):
    tokens, lengths = fresh
    predicted = shipped.predict(tokens)
    n = tokens.shape[1]
    hits = [predicted[s, i] == tokens[s, i + 1]
            for s, t in enumerate(lengths) for i in range(n - t, n - 1)]  # fmt: skip
    assert np.mean(hits) >= 0.9


def test_its_heads_are_found_from_attention_weights_alone(shipped, fresh):
    tokens, lengths = fresh
    w = shipped.attention_weights(tokens)  # (B, L, h, N, N)
    n = tokens.shape[1]
    previous = np.mean([w[:, :, :, i, i - 1] for i in range(1, n)], axis=0).mean(axis=0)
    induction = np.mean([w[s, :, :, i, i - t + 1]
                         for s, t in enumerate(lengths) for i in range(n - t, n - 1)], axis=0)  # fmt: skip
    assert previous[0].max() > 0.6  # a previous-token head in layer 0
    assert induction[1].max() > 0.6  # an induction head in layer 1
    assert induction[0].max() < 0.3 and previous[1].max() < 0.3  # and not the other way round


def test_pretrained_returns_a_fresh_copy_and_refuses_unknown_names(shipped):
    again = pretrained("induction")
    again.params["embed"][...] = 0
    assert not np.all(shipped.params["embed"] == 0)
    assert isinstance(again, TinyTransformer)
    with pytest.raises(AttnlabError, match="induction"):
        pretrained("gpt2")


def test_the_shipped_model_has_the_default_labs_configuration(shipped):
    import inspect

    from attnlab.labs import train_induction

    defaults = {k: p.default for k, p in inspect.signature(train_induction).parameters.items()}
    for key in ("vocab_size", "context", "layers", "heads", "d_model", "seed"):
        assert shipped.config[key] == defaults[key], key


def test_checkpoints_end_with_the_shipped_model_and_start_untrained(shipped, fresh):
    from attnlab.transformer import checkpoints

    kept = checkpoints("induction")
    steps = [s for s, _ in kept]
    assert steps == sorted(steps) and steps[0] == 0 and len(steps) >= 3
    last = kept[-1][1]
    assert all(np.array_equal(last.params[k], shipped.params[k]) for k in shipped.params)
    tokens, lengths = fresh
    w = kept[0][1].attention_weights(tokens[:50])
    n = tokens.shape[1]
    before = np.mean([w[s, 1, :, i, i - t + 1]
                      for s, t in enumerate(lengths[:50]) for i in range(n - t, n - 1)], axis=0)  # fmt: skip
    assert before.max() < 0.3  # at step 0 no induction head yet
