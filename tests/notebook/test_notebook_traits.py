"""Every trait of every notebook widget is checked before it is stored.

For each trait: its edges are accepted, values past them, of the wrong type or the wrong shape
are refused with a ``WidgetValueError`` (an ``AttnlabError`` and a traitlets ``TraitError``) that
names the trait; the widget keeps every trait and its view as they were, shows the reason in
``error``, and the next good change works (and clears the reason). The same holds for a change
sent by the view (``set_state``), which is rolled back whole and sent back to the view.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("anywidget")

import anywidget
import traitlets

import attnlab as al
import attnlab.notebook as anb
from attnlab.figures.multihead import SENTENCE
from attnlab.figures.stepper import MAX_WIDTH
from tolerances import CHAPTER

SETTABLE = {
    "stepper": ["step", "causal", "scaled", "q", "k", "v", "blocked", "grad_output"],
    "histogram": ["d_k", "scaled", "seed"],
    "permutation": ["order", "positions", "words"],
    "multihead": ["query"],
}
OUTPUTS = ["view", "controls", "error"]
EYE3 = np.eye(3).tolist()

# (widget, trait, refused value, words the message must hold)
REFUSED = [
    ("stepper", "step", 0, "from 1 to 11"),
    ("stepper", "step", 12, "from 1 to 11"),
    ("stepper", "step", -1, "from 1 to 11"),
    ("stepper", "step", 2.0, "whole number"),
    ("stepper", "step", "3", "whole number"),
    ("stepper", "step", True, "whole number"),
    ("stepper", "step", None, "whole number"),
    ("stepper", "causal", 0, "True or False"),
    ("stepper", "causal", "False", "True or False"),
    ("stepper", "causal", None, "True or False"),
    ("stepper", "scaled", 1, "True or False"),
    ("stepper", "q", [[1] * 100] * 100, "1 to 32 rows"),
    ("stepper", "q", np.ones((33, 2)), "1 to 32 rows"),
    ("stepper", "q", np.ones((2, MAX_WIDTH + 1)), f"1 to {MAX_WIDTH} columns"),
    ("stepper", "q", [[1.0, 2.0], [3.0]], "same length"),
    ("stepper", "q", [1.0, 2.0], "shape (2,)"),
    ("stepper", "q", np.ones((2, 2, 2)), "shape (2, 2, 2)"),
    ("stepper", "q", [], "shape (0,)"),
    ("stepper", "q", "abc", "real numbers"),
    ("stepper", "q", [[True, False], [False, True]], "True/False"),
    ("stepper", "q", [[np.nan, 1.0], [1.0, 1.0]], "finite"),
    ("stepper", "q", [[1.0, np.inf], [1.0, 1.0]], "finite"),
    ("stepper", "q", [[1000.5, 0.0], [0.0, 0.0]], "±1000"),
    ("stepper", "q", np.ones((2, 3)), "share d_k"),  # k is (2, 2)
    ("stepper", "k", np.ones((2, 3)), "share d_k"),
    ("stepper", "k", np.ones((3, 2)), "same number of rows"),  # v has 2 rows
    ("stepper", "k", None, "rows all have the same length"),
    ("stepper", "v", np.ones((3, 2)), "same number of rows"),
    ("stepper", "v", [[1, 2], [3, 4j]], "complex"),
    ("stepper", "blocked", [[0, 5]], "0 <= j < 2"),
    ("stepper", "blocked", [[2, 0]], "0 <= i < 2"),
    ("stepper", "blocked", [[0]], "pair"),
    ("stepper", "blocked", [[0, 1.0]], "whole numbers"),
    ("stepper", "blocked", "x", "list of [i, j] pairs"),
    ("stepper", "grad_output", [[1.0, 2.0, 3.0]], "(N, d_v) = (2, 2)"),
    ("stepper", "grad_output", [[np.nan, 1.0], [1.0, 1.0]], "finite"),
    ("stepper", "grad_output", [[1e4, 1.0], [1.0, 1.0]], "±1000"),
    ("histogram", "d_k", 3, "from 16 to 256"),
    ("histogram", "d_k", 15, "from 16 to 256"),
    ("histogram", "d_k", 257, "from 16 to 256"),
    ("histogram", "d_k", 64.0, "whole number"),
    ("histogram", "d_k", "64", "whole number"),
    ("histogram", "scaled", "yes", "True or False"),
    ("histogram", "seed", -1, "from 0 to 4294967295"),
    ("histogram", "seed", 2**32, "from 0 to 4294967295"),
    ("histogram", "seed", 0.5, "whole number"),
    ("permutation", "order", [0, 1, 2], "0..4 once each"),
    ("permutation", "order", [0, 0, 1, 2, 3], "0..4 once each"),
    ("permutation", "order", [0, 1, 2, 3, 5], "0..4 once each"),
    ("permutation", "order", "01234", "0..4 once each"),
    ("permutation", "order", [0, 1, 2, 3, 4.5], "0..4 once each"),
    ("permutation", "positions", "on", "True or False"),
    ("permutation", "words", ["one"], "2 to 12 words"),
    ("permutation", "words", ["w"] * 13, "2 to 12 words"),
    ("permutation", "words", "The dog bit", "list of words"),
    ("permutation", "words", ["The", 3], "words[1]"),
    ("permutation", "words", ["The", "   "], "words[1]"),
    ("permutation", "words", ["The", "x" * 41], "1 to 40 characters"),
    ("multihead", "query", 99, "from 0 to 9"),
    ("multihead", "query", -1, "from 0 to 9"),
    ("multihead", "query", 10, "from 0 to 9"),
    ("multihead", "query", "it", "whole number"),
    ("multihead", "query", np.float64(3), "whole number"),
]

# (widget, trait, accepted value at or near an edge, the value then stored)
ACCEPTED = [
    ("stepper", "step", 1, 1),
    ("stepper", "step", 11, 11),
    ("stepper", "step", np.int64(6), 6),
    ("stepper", "causal", np.bool_(False), False),
    ("stepper", "q", np.array([[1000.0, -1000.0], [0, 0]]), [[1000.0, -1000.0], [0.0, 0.0]]),
    ("stepper", "q", np.ones((8, 2), np.int32), [[1.0, 1.0]] * 8),
    ("stepper", "blocked", [(1, 0)], [[1, 0]]),
    ("stepper", "grad_output", np.full((2, 2), -1000.0), [[-1000.0, -1000.0]] * 2),
    ("stepper", "grad_output", None, None),
    ("histogram", "d_k", 16, 16),
    ("histogram", "d_k", 256, 256),
    ("histogram", "seed", 2**32 - 1, 2**32 - 1),
    ("permutation", "order", [], []),
    ("permutation", "order", (4, 3, 2, 1, 0), [4, 3, 2, 1, 0]),
    (
        "permutation",
        "words",
        ["The", "man", "bit", "the", "dog"],
        ["The", "man", "bit", "the", "dog"],
    ),
    ("multihead", "query", 0, 0),
    ("multihead", "query", np.int8(9), 9),
]


def _make(kind: str):
    return getattr(anb, kind)()


def _state(w, kind: str) -> str:
    return json.dumps({n: getattr(w, n) for n in SETTABLE[kind] + ["view"]}, sort_keys=True)


def test_the_tables_cover_every_trait_each_widget_adds():
    for kind, names in SETTABLE.items():
        cls = type(_make(kind))
        added = set(cls.class_trait_names(sync=True)) - set(
            anywidget.AnyWidget.class_trait_names(sync=True)
        )
        assert {n for n in added if not n.startswith("_")} == set(names) | set(OUTPUTS), kind
        assert {name for k, name, *_ in REFUSED if k == kind} == set(names), kind


@pytest.mark.parametrize(("kind", "name", "value", "words"), REFUSED)
def test_a_refused_value_is_never_stored(kind, name, value, words):
    w = _make(kind)
    before = _state(w, kind)
    with pytest.raises(anb.WidgetValueError, match=name) as caught:
        setattr(w, name, value)
    assert isinstance(caught.value, al.AttnlabError)
    assert isinstance(caught.value, traitlets.TraitError)
    message = str(caught.value)
    assert words in message
    assert f"{name} stays" in message
    assert _state(w, kind) == before  # every trait and the view as they were
    assert w.error == message  # the view's error line says why


@pytest.mark.parametrize(("kind", "name", "value", "stored"), ACCEPTED)
def test_an_edge_value_is_stored_in_plain_form(kind, name, value, stored):
    w = _make(kind)
    setattr(w, name, value)
    assert getattr(w, name) == stored
    assert type(getattr(w, name)) is type(stored)
    json.dumps(getattr(w, name))  # what the view receives
    assert w.error == ""


@pytest.mark.parametrize("name", OUTPUTS)
def test_the_outputs_cannot_be_set_from_a_cell(name):
    w = anb.stepper()
    before = _state(w, "stepper")
    with pytest.raises(traitlets.TraitError, match="read-only"):
        setattr(w, name, {} if name == "view" else "")
    assert _state(w, "stepper") == before


def test_the_stepper_works_after_the_reported_bad_value():
    # w.q = 100 x 100, then w.causal = False: the bad value is refused, the next change works.
    w = anb.stepper()
    with pytest.raises(al.AttnlabError, match=r"q.shape=\(100, 100\)"):
        w.q = [[1] * 100] * 100
    assert "q stays [[3.0, -3.0], [1.0, 1.0]]" in w.error
    w.causal = False
    assert w.error == ""
    w.step = 5
    weights = np.array(w.view["tables"][-1]["values"], dtype=float)
    np.testing.assert_allclose(weights[0], [0.000003, 0.999997], **CHAPTER)  # no mask: §6.4


def test_the_histogram_and_multihead_work_after_their_reported_bad_values():
    h = anb.histogram()
    with pytest.raises(al.AttnlabError, match="d_k"):
        h.d_k = 3
    h.d_k = 256
    assert h.view["title"] == "Scores q·k at d_k = 256, unscaled" and h.error == ""
    m = anb.multihead()
    with pytest.raises(al.AttnlabError, match="query"):
        m.query = 99
    m.query = 7
    assert f"'{SENTENCE[7]}'" in m.view["title"]


def test_several_traits_set_together_are_checked_together():
    # Changing the width needs q, k and v at once: each alone would not fit the others.
    w = anb.stepper(mask="none")
    with w.hold_trait_notifications():
        w.q, w.k, w.v = EYE3, EYE3, EYE3
    w.step = 6
    out = np.array(w.view["tables"][-1]["values"], dtype=float)
    np.testing.assert_allclose(out, al.attention(EYE3, EYE3, EYE3), rtol=1e-12)
    # ... and a misfit among them rolls every one of them back.
    with pytest.raises(anb.WidgetValueError), w.hold_trait_notifications():
        w.q, w.k = np.ones((3, 2)), np.ones((3, 2))  # v is still (3, 3): fine; q and k agree
        w.v = np.ones((2, 3))  # but v's rows no longer match k's
    assert w.q == EYE3 and w.k == EYE3 and w.v == EYE3


def test_words_and_order_must_fit_each_other():
    p = anb.permutation()
    p.order = [4, 3, 2, 1, 0]
    with pytest.raises(anb.WidgetValueError, match=r"set order = \[\] before"):
        p.words = ["a", "b"]
    p.order = []
    p.words = ["a", "b"]
    assert p.view["title"] == "a b"


class _Sent:
    """Records what the widget sends back to the view."""

    def __init__(self, w):
        self.keys: list[list[str]] = []
        original = w.send_state

        def spy(key=None):
            if isinstance(key, list):  # a single trait's change comes as a str
                self.keys.append(key)
            return original(key)

        w.send_state = spy


def test_a_change_from_the_view_is_rolled_back_whole_and_sent_back():
    w = anb.stepper()
    sent = _Sent(w)
    before = _state(w, "stepper")
    w.set_state({"step": 3, "causal": "x"})  # the view never raises into the kernel's log
    assert _state(w, "stepper") == before
    assert "causal" in w.error and "step stays 1" in w.error and "causal stays True" in w.error
    assert sent.keys == [["step", "causal"]]  # the view gets the good values back
    w.set_state({"step": 99})
    assert w.step == 1 and "from 1 to 11" in w.error
    w.set_state({"step": 3, "causal": False})
    assert (w.step, w.causal, w.error) == (3, False, "")
    assert w.view["title"].startswith("Step 3 of 11")


def test_the_stepper_counts_steps_from_one_in_the_trait_the_heading_and_the_control():
    w = anb.stepper()
    assert w.step == 1 and w.view["title"].startswith("Step 1 of 11")
    step = next(c for c in w.controls if c["name"] == "step")
    assert (step["min"], step["max"]) == (1, 11)
    w.step = 11
    assert w.view["title"].startswith("Step 11 of 11") and "dK" in w.view["title"] + str(
        w.view["tables"][-1]["label"]
    )


def test_import_stays_light_and_notebook_and_distributed_load_on_first_use():
    code = (
        "import json, sys, attnlab as al\n"
        "before = sorted(m for m in ('attnlab.notebook', 'attnlab.distributed', 'anywidget',"
        " 'dask') if m in sys.modules)\n"
        "w = al.notebook.stepper(); d = al.distributed\n"
        "print(json.dumps({'before': before, 'title': w.view['title'],"
        " 'dist': d.__name__, 'again': al.notebook is sys.modules['attnlab.notebook']}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(done.stdout)
    assert seen == {
        "before": [],
        "title": "Step 1 of 11: Queries, keys and values",
        "dist": "attnlab.distributed",
        "again": True,
    }


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: anb.histogram(3), "expected d_k to be a whole number from 16 to 256"),
        (lambda: anb.histogram(64, seed=-1), "expected seed"),
        (lambda: anb.multihead(99), "expected query to be a whole number from 0 to 9"),
        (lambda: anb.stepper(step=0), "expected step to be a whole number from 1 to 11"),
        (lambda: anb.stepper([[1, 2]] * 33), "1 to 32 rows"),
        (lambda: anb.permutation("one"), "2 to 12 words"),
    ],
)
def test_a_widget_made_with_a_bad_value_is_refused_by_the_same_check(make, words):
    with pytest.raises(al.AttnlabError, match=words):
        make()
