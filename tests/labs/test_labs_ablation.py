"""The ablate-heads lab: each row is the shipped model measured with that head (or layer)
knocked out, recomputed here from ``predict`` and ``token_losses`` on the lab's own sequences."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.labs import LABS, ablate_heads
from attnlab.labs._common import rng_for
from attnlab.labs._training import FRESH
from attnlab.labs.ablation import ABLATE
from attnlab.labs.induction import induction_sequences
from attnlab.transformer import pretrained


@pytest.fixture(scope="module")
def result():
    return ablate_heads(fresh=60, seed=3)


def test_rows_are_intact_then_each_head_then_each_layer(result):
    names = [r.ablated for r in result.rows]
    assert names[0] == "none" and names[-2:] == ["layer 0", "layer 1"]
    assert names[1:-2] == [f"L{i}H{j}" for i in range(2) for j in range(4)]
    assert set(result.position_losses) == set(names)


def test_each_row_is_the_model_measured_with_that_ablation(result):
    model = pretrained("induction")
    cfg = model.config
    n = cfg["context"]
    tokens, lengths = induction_sequences(rng_for(3, ABLATE, FRESH), 60, n, cfg["vocab_size"])
    targets = np.full_like(tokens, -1)
    for s, t in enumerate(lengths):  # the second copy's positions, the last one left out
        targets[s, n - t : n - 1] = tokens[s, n - t + 1 :]
    for row in result.rows:
        off = ([] if row.layer is None else
               [(row.layer, row.head)] if row.head is not None else
               [(row.layer, h) for h in range(cfg["heads"])])  # fmt: skip
        hits = model.predict(tokens, ablate=off) == targets
        assert row.accuracy == pytest.approx(hits[targets >= 0].mean(), abs=1e-12)
        loss = model.loss(tokens, targets, ablate=off)
        assert row.loss == pytest.approx(loss, rel=1e-5)
        assert result.position_losses[row.ablated]["second_mean"] == pytest.approx(row.loss)


def test_knocking_out_layer_0s_previous_token_head_costs_most(result):
    base, worst = result.rows[0], result.worst()
    assert worst.layer == 0 and worst.pattern == "previous-token"
    assert worst.accuracy < base.accuracy - 0.3
    others = [r for r in result.rows if r.head is not None and r is not worst]
    assert all(r.accuracy > worst.accuracy + 0.2 for r in others)
    # copying shows in the loss per position: low in the second copy, high in the first
    intact = result.position_losses["none"]
    assert max(v for v in intact["second_copy"] if v is not None) < 2.0
    assert min(v for v in intact["first_copy"] if v is not None) > 4.0
    assert result.position_losses[worst.ablated]["second_mean"] > intact["second_mean"] + 1.0


def test_mean_ablation_is_an_option_and_bad_ones_are_refused():
    mean = ablate_heads(fresh=20, seed=1, ablation="mean")
    assert mean.ablation == "mean" and mean.rows[0].accuracy > mean.worst().accuracy
    with pytest.raises(AttnlabError, match="ablation"):
        ablate_heads(fresh=5, ablation="resample")
    with pytest.raises(AttnlabError, match="fresh"):
        ablate_heads(fresh=0)


def test_the_json_and_the_plot_carry_the_position_losses(result):
    data = result.as_dict()
    assert data["lab"] == "ablate-heads"
    assert len(data["position_losses"]["none"]["second_copy"]) == 15  # offsets 0 … N/2 - 2
    plot = LABS["ablate-heads"].figure(result)
    assert plot.x == list(range(15)) and len(plot.series) == 5


def test_the_training_labs_report_loss_per_position():
    from attnlab.labs import train_induction, train_positions, train_scaling

    ind = train_induction(steps=3, batch=4, context=8, d_model=8, heads=2, vocab_size=8, fresh=8)
    assert set(ind.position_losses) == {"first_copy", "second_copy", "first_mean", "second_mean"}
    assert len(ind.position_losses["second_copy"]) == 3  # offsets 0 … 8/2 - 2
    pos = train_positions(steps=120, context=6, vocab_size=8, fresh=200)
    assert len(pos.position_losses["with"]) == len(pos.position_losses["without"]) == 6
    # with positions the shift is learned everywhere: lower loss at every position but 0's
    # fixed symbol, which needs no order
    assert all(w < wo for w, wo in zip(pos.position_losses["with"][1:],
                                       pos.position_losses["without"][1:], strict=True))  # fmt: skip
    scaling = train_scaling(widths=(8,), steps=3, batch=4, runs=2, context=8, vocab_size=8)
    for row in scaling.rows:
        assert len(row.position_losses["second_copy"]) == 3
        assert row.position_losses["second_mean"] > 0
    assert "position_losses" not in scaling.scaled  # the headline stays a few numbers
