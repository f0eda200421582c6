"""``TinyTransformer.load``, ``save`` and ``Adam`` refuse what they cannot use, at the call.

Every bad file, config, weight or hyperparameter is one ``AttnlabError`` naming the file, the
key or the value, raised before a model is built or a step taken: never an ``OSError``,
``KeyError`` or ``json`` error from inside, and never a model holding NaN that fails later.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.transformer import Adam, TinyTransformer

SMALL = dict(vocab_size=8, context=6, layers=1, heads=2, d_model=4)


@pytest.fixture
def model():
    return TinyTransformer(**SMALL, dtype=np.float32)


def _entries(model) -> dict:
    return {"config": np.array(json.dumps(model.config)), **model.params}


def _write(path, entries: dict) -> str:
    np.savez(path, **entries)
    return str(path)


def _refused(path, *words):
    with pytest.raises(AttnlabError) as info:
        TinyTransformer.load(path)
    message = str(info.value)
    assert all(w in message for w in words), message
    return message


def test_a_missing_file_names_it(tmp_path):
    _refused(tmp_path / "nope.npz", "nope.npz")


def test_a_folder_names_it(tmp_path):
    _refused(tmp_path, str(tmp_path))


def test_a_nul_in_the_path_is_named():
    _refused("m\x00.npz", "path")


@pytest.mark.parametrize(
    "text", [b"not a zip at all", b"PK\x03\x04broken", b"", b"\x93NUMPY\x01\x00v\x00{'descr"]
)
def test_a_file_that_is_not_an_npz_names_it(tmp_path, text):
    path = tmp_path / "m.npz"
    path.write_bytes(text)
    _refused(path, "m.npz")


def test_a_zip_that_is_not_an_npz_names_it(tmp_path):
    path = tmp_path / "m.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.npy", b"garbage")
    _refused(path, "m.npz")


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (np.array("{not json"), ("config", "JSON")),
        (np.array("[1, 2]"), ("config", "object")),
        (np.array("null"), ("config", "object")),
        (np.arange(3.0), ("config", "text")),
        (np.array(7), ("config", "text")),
    ],
)
def test_a_config_that_is_not_a_json_object_is_named(tmp_path, model, config, words):
    path = _write(tmp_path / "m.npz", _entries(model) | {"config": config})
    _refused(path, "m.npz", *words)


def test_an_unknown_key_in_the_config_is_named(tmp_path, model):
    config = np.array(json.dumps(model.config | {"colour": "red"}))
    _refused(_write(tmp_path / "m.npz", _entries(model) | {"config": config}), "colour")


def test_a_missing_key_in_the_config_is_named(tmp_path, model):
    config = dict(model.config)
    del config["heads"]
    path = _write(tmp_path / "m.npz", _entries(model) | {"config": np.array(json.dumps(config))})
    _refused(path, "heads")


def test_a_missing_config_entry_is_named(tmp_path, model):
    _refused(_write(tmp_path / "m.npz", dict(model.params)), "config")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (np.nan, ("embed", "finite")),
        (np.inf, ("embed", "finite")),
        (1e300, ("embed", "float32")),  # finite in the file, inf in the model's dtype
    ],
)
def test_weights_that_are_not_finite_in_the_models_dtype_are_named(tmp_path, model, value, words):
    embed = model.params["embed"].astype(np.float64)
    embed[1, 2] = value
    _refused(_write(tmp_path / "m.npz", _entries(model) | {"embed": embed}), *words)


@pytest.mark.parametrize(
    "embed",
    [
        np.ones((8, 4), complex),
        np.full((8, 4), "1.0"),
        np.ones((8, 4), bool),
        np.ones((8, 4), np.int64),
        np.empty((8, 4), object),
    ],
    ids=["complex", "string", "bool", "int", "object"],
)
def test_weights_that_are_not_real_floats_are_named(tmp_path, model, embed):
    _refused(_write(tmp_path / "m.npz", _entries(model) | {"embed": embed}), "embed")


def test_a_huge_legal_config_is_refused_before_allocating(tmp_path, model, monkeypatch):
    from attnlab.transformer import _config

    monkeypatch.setattr(_config, "_machine_bytes", lambda: 64 << 30)  # whatever runs the test
    huge = dict(model.config, vocab_size=65536, d_model=8192, heads=8, layers=64, mlp=True)
    path = _write(tmp_path / "m.npz", {"config": np.array(json.dumps(huge))})
    _refused(path, "GiB", "memory")
    with pytest.raises(AttnlabError, match="GiB"):
        TinyTransformer(**{k: v for k, v in huge.items() if k != "dtype"})


@pytest.mark.parametrize(
    "tokens", [[[1, 2], [3]], [["a", "b"]], [[1.5, 2.0]], [[None, 1]]], ids=str
)
def test_ragged_or_non_integer_tokens_are_named(model, tokens):
    with pytest.raises(AttnlabError, match="tokens"):
        model.predict(tokens)


def test_a_good_file_still_loads(tmp_path, model):
    model.save(tmp_path / "m.npz")
    back = TinyTransformer.load(tmp_path / "m.npz")
    assert all(np.array_equal(back.params[k], model.params[k]) for k in model.params)


# -- Adam -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"lr": np.inf}, "lr"),
        ({"lr": np.nan}, "lr"),
        ({"lr": 1e300}, "lr"),
        ({"lr": True}, "lr"),
        ({"lr": "0.1"}, "lr"),
        ({"lr": 0}, "lr"),
        ({"eps": np.nan}, "eps"),
        ({"eps": -1}, "eps"),
        ({"eps": 0}, "eps"),
        ({"eps": np.inf}, "eps"),
        ({"eps": False}, "eps"),
        ({"betas": (0.9, np.nan)}, "betas"),
        ({"betas": (True, 0.9)}, "betas"),
        ({"betas": 0.9}, "betas"),
    ],
    ids=str,
)
def test_adam_refuses_a_hyperparameter_it_cannot_use(model, kwargs, name):
    with pytest.raises(AttnlabError, match=name):
        Adam(model.params, **kwargs)
