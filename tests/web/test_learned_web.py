"""GET /api/learned: the shipped model's own weights and predictions, and refusals that name
the field."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.transformer import pretrained


def test_a_typed_sequence_gets_the_models_own_weights(client):
    tokens = [5, 9, 12, 40, 7, 5, 9, 12, 40]
    data = client.get("/api/learned", params={"tokens": " ".join(map(str, tokens))}).json()
    model = pretrained("induction")
    expected = model.attention_weights(np.array([tokens]))[0]
    np.testing.assert_allclose(data["weights"], expected, atol=6e-5)  # rounded to 4 places
    assert data["predictions"] == model.predict(np.array([tokens]))[0].tolist()
    assert data["repeat"] is None and data["tokens"] == tokens
    # The copy is continued: after the second "5 9 12" comes 40.
    assert data["predictions"][7] == 40


def test_a_generated_sequence_repeats_and_heads_are_labelled(client):
    data = client.get("/api/learned", params={"seed": 3}).json()
    n, t = len(data["tokens"]), data["repeat"]
    assert data["tokens"][n - t :] == data["tokens"][n - 2 * t : n - t]
    patterns = {(h["layer"], h["pattern"]) for h in data["heads"]}
    assert (0, "previous-token") in patterns and (1, "induction") in patterns
    assert client.get("/api/learned", params={"seed": 3}).json() == data  # seeded


@pytest.mark.parametrize("tokens", ["1 2 x", "1 2 256", " ", " ".join(["1"] * 33)])
def test_bad_tokens_are_a_422_naming_the_field(client, tokens):
    answer = client.get("/api/learned", params={"tokens": tokens})
    assert answer.status_code == 422
    assert "tokens" in answer.text


def test_the_old_page_opens_the_explorer_in_learned_mode(client):
    moved = client.get("/learned", follow_redirects=False)
    assert moved.status_code in (302, 307)
    assert moved.headers["location"] == "/?mh.mode=learned#figure-multi-head"
    page = client.get(moved.headers["location"])
    assert 'id="mh-learned"' in page.text and 'id="learned-open"' in page.text


def test_checkpoints_show_the_induction_head_forming(client):
    final = client.get("/api/learned", params={"seed": 2}).json()
    steps = final["checkpoints"]
    assert final["checkpoint"] == len(steps) - 1 and steps == sorted(steps) and steps[0] == 0
    first = client.get("/api/learned", params={"seed": 2, "checkpoint": 0}).json()
    assert first["tokens"] == final["tokens"] and first["weights"] != final["weights"]
    # Before training no head has a pattern; after it, both kinds exist.
    assert {h["pattern"] for h in first["heads"]} == {"other"}
    assert max(h["induction_score"] for h in final["heads"] if h["layer"] == 1) > 0.6
    refused = client.get("/api/learned", params={"checkpoint": len(steps)})
    assert refused.status_code == 422 and "checkpoint" in refused.text
