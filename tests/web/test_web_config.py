"""The page's constants come from the server (docs/style.md, "constants live in Python").

``GET /api/config`` must equal the Python constants, and the page's HTML and JS must not
declare them again: a literal that comes back makes these tests fail.
"""

from __future__ import annotations

import re
import warnings

import pytest

from attnlab.figures import histogram, permutation, stepper
from attnlab.web import create_app
from attnlab.web.app import STATIC

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

SCRIPTS = sorted((STATIC / "js").glob("*.js"))
PAGE = STATIC / "index.html"


@pytest.fixture(scope="module")
def served() -> dict:
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        response = client.get("/api/config")
    assert response.status_code == 200, response.text
    return response.json()


# (module, constant, where /api/config serves it). The route must read each constant when it is
# asked: the test below swaps every one for a value nobody would write, and looks for it.
SERVED = [
    (stepper, "EXAMPLE_Q", "stepper.example.q"),
    (stepper, "EXAMPLE_K", "stepper.example.k"),
    (stepper, "EXAMPLE_V", "stepper.example.v"),
    (stepper, "MAX_TOKENS", "stepper.max_tokens"),
    (stepper, "MAX_WIDTH", "stepper.max_width"),
    (stepper, "MAX_ABS", "stepper.max_abs"),
    (stepper, "RANDOM_TOKENS", "stepper.random_tokens"),
    (stepper, "RANDOM_WIDTH", "stepper.random_width"),
    (stepper, "RANDOM_RANGE", "stepper.random_range"),
    (histogram, "D_K_MIN", "histogram.d_k_min"),
    (histogram, "D_K_MAX", "histogram.d_k_max"),
    (histogram, "D_K_STEP", "histogram.d_k_step"),
    (histogram, "D_K_DEFAULT", "histogram.d_k_default"),
    (histogram, "KEYS", "histogram.keys"),
    (histogram, "TRIALS", "histogram.trials"),
    (histogram, "THRESHOLD", "histogram.threshold"),
    (permutation, "SENTENCE", "permutation.sentence"),
    (permutation, "SWAP", "permutation.swap"),
    (permutation, "MIN_WORDS", "permutation.min_words"),
    (permutation, "MAX_WORDS", "permutation.max_words"),
    (permutation, "MAX_WORD_LENGTH", "permutation.max_word_length"),
]


def _odd(value, n: int):
    """A value of ``value``'s type that appears nowhere else: 9000 + n, in its shape."""
    if isinstance(value, str):
        return f"word{n}"
    if isinstance(value, list | tuple):
        return [_odd(value[0], n)]
    return type(value)(9000 + n)


def test_config_route_serves_each_constant_where_it_lives(monkeypatch):
    odd = {}
    for n, (module, name, path) in enumerate(SERVED):
        odd[path] = _odd(getattr(module, name), n)
        monkeypatch.setattr(module, name, odd[path])
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        served = client.get("/api/config").json()
    for path, value in odd.items():
        got = served
        for key in path.split("."):
            got = got[key]
        assert got == value, path


def test_the_unpatched_config_is_the_chapters(served):
    assert served["stepper"]["example"]["q"] == [[3, -3], [1, 1]]  # §6.2's two tokens
    assert served["stepper"]["example"]["v"] == [[0, -1], [1, 2]]


def test_config_serves_every_step_of_the_pass_in_the_traces_order(served):
    names = [s["name"] for s in served["stages"]]
    assert names == ["scores", "scaled", "masked", "weights", "output", "grad_output",
                     "grad_v", "grad_weights", "grad_scores", "grad_q", "grad_k"]  # fmt: skip
    for s in served["stages"]:
        assert s["symbol"] and s["caption"] and s["explain"] and s["formula"]
        assert s["phase"] == ("backward" if s["name"].startswith("grad_") else "forward")
    weights = next(s for s in served["stages"] if s["name"] == "weights")
    assert weights["symbol"] == "A"  # the chapter's letter; P is §6.5's permutation


def test_each_stage_caption_is_printed_by_example_backward(served):
    from typer.testing import CliRunner

    from attnlab.cli import app

    for columns in ("30", "80"):  # a caption is never cut, however narrow the terminal
        narrow = CliRunner().invoke(app, ["example", "--backward"], env={"COLUMNS": columns})
        assert narrow.exit_code == 0, narrow.output
        for s in served["stages"]:
            assert s["caption"] in narrow.output, (columns, s["name"])
    out = CliRunner().invoke(app, ["example", "--backward"], env={"COLUMNS": "80"})
    grad_q = next(s for s in served["stages"] if s["name"] == "grad_q")
    assert grad_q["explain"] in " ".join(out.output.split())  # the same words, wrapped
    assert "moves along" not in out.output


def test_the_constants_agree_with_each_other():
    # The slider's steps land on both ends, and the swap is a reordering of the sentence.
    assert (histogram.D_K_MAX - histogram.D_K_MIN) % histogram.D_K_STEP == 0
    assert (histogram.D_K_DEFAULT - histogram.D_K_MIN) % histogram.D_K_STEP == 0
    assert sorted(permutation.SWAP) == list(range(len(permutation.SENTENCE)))
    assert stepper.RANDOM_TOKENS <= stepper.MAX_TOKENS and stepper.RANDOM_WIDTH <= stepper.MAX_WIDTH


# -- no literal comes back ------------------------------------------------------------------------

NUMBER = r"-?\d+(?:\.\d+)?"
MATRIX = re.compile(rf"\[\s*\[\s*{NUMBER}\s*,\s*{NUMBER}")  # [[3, -3], ...
INT_LIST = re.compile(rf"\[\s*{NUMBER}(?:\s*,\s*{NUMBER}){{2,}}\s*\]")  # [0, 4, 2, 3, 1]
NUMERIC_CONST = re.compile(rf"^(?:export\s+)?const\s+\w+\s*=\s*{NUMBER}\s*;", re.M)


def _distinctive() -> set[str]:
    """Constants whose value would be recognisable as a literal (16, 256, 64, 0.99, 1000...)."""
    values = {
        histogram.D_K_MIN,
        histogram.D_K_MAX,
        histogram.D_K_STEP,
        histogram.D_K_DEFAULT,
        histogram.KEYS,
        histogram.TRIALS,
        histogram.THRESHOLD,
        stepper.MAX_ABS,
    }
    out = set()
    for v in values:
        out.add(f"{v:g}")
        if isinstance(v, float) and 0 < v < 1:
            out.add(f"{100 * v:g}%")  # 0.99 written as 99%
    return out


def _number_tokens(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w.#-])\d+(?:\.\d+)?%?(?![\w.])", text))


def _strip_comments(js: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", js, flags=re.S)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_scripts_declare_no_constant_of_the_server(path):
    js = _strip_comments(path.read_text())
    assert not MATRIX.search(js), f"{path.name}: a matrix literal (the worked example?)"
    assert not INT_LIST.search(js), f"{path.name}: a list of numbers (the permutation swap?)"
    found = NUMERIC_CONST.findall(js)
    assert not found, f"{path.name}: a module-level number constant: {found}"
    again = _number_tokens(js) & _distinctive()
    assert not again, f"{path.name}: a constant of attnlab.figures written as a literal: {again}"


def test_page_declares_no_constant_of_the_server():
    html = PAGE.read_text()
    slider = re.search(r"<input[^>]*id=\"hist-dk\"[^>]*>", html).group(0)
    for attribute in ("min", "max", "step", "value"):
        assert f" {attribute}=" not in slider, f"the d_k slider declares its own {attribute}"
    text = re.sub(r"<[^>]+>", " ", html)
    again = _number_tokens(text) & _distinctive()
    assert not again, f"index.html quotes a constant of attnlab.figures as a literal: {again}"
    assert not re.search(r"up to \d+ tokens|Random \d+ tokens", text)
    assert "The man bit the dog" not in html  # the swap button is named from SWAP


def test_the_literal_checks_can_fail():
    old = "const EXAMPLE = {\n  q: [[3, -3], [1, 1]],\n};\nconst MAX = 8;\nstate.order = [0, 4, 2, 3, 1];"
    assert MATRIX.search(old) and INT_LIST.search(old) and NUMERIC_CONST.search(old)
    assert _number_tokens('min="16" max="256" more than 99% and 0.99') & _distinctive() == {
        "16",
        "256",
        "99%",
        "0.99",
    }
