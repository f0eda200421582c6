"""A result that keeps its run's parameters in one ``settings`` field still reads, prints and
serialises them as fields of their own (the JSON and repr written out here by hand)."""

from __future__ import annotations

import json
import pickle

import pytest

from attnlab.labs import variance_scaling


def test_settings_read_as_fields_in_json_repr_and_attributes():
    r = variance_scaling(widths=(16,), draws=500, seed=3)
    assert (r.widths, r.draws, r.seed) == ((16,), 500, 3)
    assert list(r.as_dict()) == ["lab", "widths", "draws", "seed", "rows"]
    data = json.loads(r.to_json())
    assert (data["lab"], data["widths"], data["draws"], data["seed"]) == ("variance", [16], 500, 3)
    assert data["rows"][0]["width"] == 16
    assert repr(r).startswith("VarianceResult(widths=(16,), draws=500, seed=3, rows=(VarianceRow(")


def test_an_unknown_attribute_is_still_an_attribute_error():
    r = variance_scaling(widths=(16,), draws=500)
    with pytest.raises(AttributeError, match="'VarianceResult' object has no attribute 'trials'"):
        _ = r.trials


def test_a_result_with_settings_pickles_and_compares():
    r = variance_scaling(widths=(16,), draws=500)
    again = pickle.loads(pickle.dumps(r))
    assert again == r and again.draws == 500
