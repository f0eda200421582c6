"""Hypothesis over the surfaces that took careless input badly: the learned routes' query,
``TinyTransformer.load`` on damaged files, ``Adam``'s hyperparameters, and the lab writers'
``--save``/``--plot`` targets.

Each property: an answer or one typed refusal (``AttnlabError``, a 422, exit 2), never another
exception, a 5xx, a traceback or a file changed without ``--force``. Set
``ATTNLAB_SWEEP_TALLY=FILE`` to write the counts (inputs, typed errors, tracebacks, 5xx, files
lost) as JSON when the module finishes; ``docs/reliability.md`` records one run.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.errors import AttnlabError
from attnlab.transformer import Adam, TinyTransformer

TALLY: Counter = Counter()
FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
SMALL = dict(vocab_size=8, context=6, layers=1, heads=2, d_model=4)


@pytest.fixture(scope="module", autouse=True)
def tally():
    yield TALLY
    path = os.environ.get("ATTNLAB_SWEEP_TALLY")
    if path:
        with open(path, "w") as out:
            json.dump(dict(TALLY), out, indent=2, sort_keys=True)


@pytest.fixture(scope="module")
def client():
    from attnlab.web import create_app

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    with TestClient(create_app(), raise_server_exceptions=False, base_url="http://127.0.0.1") as c:
        yield c


# -- the learned routes ---------------------------------------------------------------------

TOKENS = st.one_of(
    st.text(max_size=40),
    st.lists(st.integers(-5, 300).map(str), max_size=40).map(" ".join),
    st.lists(
        st.sampled_from(["1", "2", ",", " ", ",,", "²", "１", "١", "+", "-", "\t", "0x"]),
        max_size=20,
    ).map("".join),
)


@FUZZ
@given(
    path=st.sampled_from(["/api/learned", "/api/learned/head"]),
    tokens=TOKENS,
    extra=st.dictionaries(
        st.sampled_from(["layer", "head", "query", "checkpoint", "seed"]),
        st.one_of(st.integers(-3, 40).map(str), st.text(max_size=6)),
    ),
)
def test_learned_routes_answer_or_refuse_with_422(client, path, tokens, extra):
    if path.endswith("head"):
        extra = {"layer": "0", "head": "0", "query": "0", **extra}
    answer = client.get(path, params={**extra, "tokens": tokens})
    TALLY["learned: inputs"] += 1
    TALLY[f"learned: {answer.status_code}"] += 1
    assert answer.status_code in (200, 422), (tokens, extra, answer.text[:200])
    if answer.status_code == 200:
        ids = answer.json()["tokens"]
        assert ids == [int(t) for t in tokens.replace(",", " ").split()]
        assert all(t.isascii() and t.isdigit() for t in tokens.replace(",", " ").split())


# -- TinyTransformer.load -------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
KEYS = ["vocab_size", "context", "layers", "heads", "d_model", "mlp", "positions", "causal",
        "scaled", "dtype", "seed", "init_std", "colour"]  # fmt: skip


def _good() -> dict:
    model = TinyTransformer(**SMALL)
    return {"config": json.dumps(model.config), **model.params}


@st.composite
def damaged(draw):
    entries = _good()
    kind = draw(st.sampled_from(["config-key", "config-text", "weight", "drop", "bytes"]))
    if kind == "config-key":
        config = json.loads(entries["config"])
        key = draw(st.sampled_from(KEYS))
        config[key] = draw(JSON_VALUES)
        entries["config"] = json.dumps(config)
    elif kind == "config-text":
        entries["config"] = draw(st.one_of(st.text(max_size=30), JSON_VALUES.map(json.dumps)))
    elif kind == "weight":
        name = draw(st.sampled_from([k for k in entries if k != "config"]))
        shape = entries[name].shape
        value = draw(st.one_of(st.floats(), st.complex_numbers(), st.text(max_size=3),
                               st.booleans(), st.integers(-5, 5)))  # fmt: skip
        entries[name] = np.full(shape, value)
    elif kind == "drop":
        entries.pop(draw(st.sampled_from(sorted(entries))))
    buffer = io.BytesIO()
    np.savez(buffer, **{k: np.array(v) if k == "config" else v for k, v in entries.items()})
    data = buffer.getvalue()
    if kind == "bytes":
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + draw(st.binary(max_size=16)) + data[cut + 16 :]
    return data


@FUZZ
@given(data=damaged())
def test_load_answers_a_model_or_one_attnlab_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("load") / "m.npz"
    path.write_bytes(data)
    TALLY["load: inputs"] += 1
    try:
        model = TinyTransformer.load(path)
    except AttnlabError:
        TALLY["load: typed errors"] += 1
        return
    except Exception as exc:
        TALLY["load: other exceptions"] += 1
        raise AssertionError(f"{type(exc).__name__}: {exc}") from exc
    TALLY["load: loaded"] += 1
    assert all(np.isfinite(p).all() for p in model.params.values())


NUMBERS = st.one_of(st.floats(), st.integers(-(2**70), 2**70), st.booleans(), st.text(max_size=4),
                    st.none())  # fmt: skip


@FUZZ
@given(lr=NUMBERS, eps=NUMBERS)
def test_adam_takes_a_usable_hyperparameter_or_refuses_it(lr, eps):
    model = TinyTransformer(**SMALL)
    TALLY["adam: inputs"] += 1
    try:
        opt = Adam(model.params, lr=lr, eps=eps)
    except AttnlabError:
        TALLY["adam: typed errors"] += 1
        return
    tokens = np.array([[1, 2, 3, 4]])
    _, grads = model.loss_and_grads(tokens, tokens)
    opt.step(grads)  # a usable step: every weight still finite
    assert all(np.isfinite(p).all() for p in model.params.values())


# -- the lab writers --------------------------------------------------------------------------

TRAIN = ["lab", "train-induction", "--steps", "1", "--batch", "1", "--vocab-size", "8",
         "--context", "8", "--layers", "1", "--heads", "1", "--d-model", "4", "--fresh", "2"]  # fmt: skip
VARIANCE = ["lab", "variance", "--width", "4", "--draws", "200"]


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    option=st.sampled_from(["--save", "--plot"]),
    state=st.sampled_from(["absent", "file", "folder", "symlink", "no-folder", "proc"]),
    name=st.sampled_from(["out.npz", "out.html", "out", "out.txt", ".out.npz"]),
    force=st.booleans(),
)
def test_lab_writers_never_replace_without_force(tmp_path_factory, option, state, name, force):
    folder = tmp_path_factory.mktemp("writers")
    victim = folder / "victim"
    victim.write_text("VICTIM")
    target = folder / name
    if state == "file":
        target.write_text("KEEP")
    elif state == "folder":
        target.mkdir()
    elif state == "symlink":
        target.symlink_to(victim)
    elif state == "no-folder":
        target = folder / "missing" / name
    elif state == "proc":
        target = "/proc/" + name
    args = [*(TRAIN if option == "--save" else VARIANCE), option, str(target)]
    result = CliRunner().invoke(app, args + (["--force"] if force else []))
    TALLY["writers: inputs"] += 1
    TALLY[f"writers: exit {result.exit_code}"] += 1
    assert result.exit_code in (0, 2), result.output[-500:]
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    if "Traceback" in result.output:
        TALLY["writers: tracebacks"] += 1
    assert "Traceback" not in result.output
    lost = victim.read_text() != "VICTIM" or (state == "file" and not force
                                              and target.read_text() != "KEEP")  # fmt: skip
    TALLY["writers: files lost"] += int(lost)
    assert not lost
    leftovers = [p.name for p in folder.iterdir() if p.name.endswith((".part", ".probe"))]
    assert not leftovers
