"""verify says why: kernels written in torch, each with one planted bug, are rejected and the
bug is the diagnosis's first cause; a correct kernel has no diagnosis. The summary per head x
block is in the JSON and the terminal table fits 80 columns."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.verifier import verify
from verify_kernels import bf16_pv_accumulation, correct, inputs, planted

pytestmark = pytest.mark.oracle

# the options each bug needs to show: (options, planted's keywords)
_SETUPS = {
    "scale": ({}, {}),
    "causal_offset": ({"causal": True}, {"causal": True}),
    "causal_alignment": ({"causal": True}, {"causal": True}),
    "gqa_mapping": ({}, {}),
    "dropped_keys": ({}, {}),
    "softcap_order": ({"softcap": 5.0}, {"softcap": 5.0}),
    "lse_base": ({}, {}),
    "head_permutation": ({}, {}),
    "transposed_output": ({}, {}),
    "window_offset": ({"causal": True, "window_size": (32, 0)}, {"causal": True, "window": 32}),
    "missing_sink": ({"sinks": "sinks"}, {"sinks": "sinks"}),
}


def _case(torch, bug, planted_bug=None):
    """The case for ``bug``'s options, from a kernel with ``planted_bug`` (default ``bug``)."""
    x = inputs(torch, torch.float16, h=4, h_kv=2, n=96, m=128, d=32, seed=7)
    x["q"] = (x["q"].float() * 3).half()  # larger scores: a softcap of 5 bites
    options, keywords = _SETUPS[bug]
    sinks = torch.tensor([0.5, 1.0, 2.0, 3.0])
    keywords = {k: sinks if w == "sinks" else w for k, w in keywords.items()}
    options = {k: sinks.numpy() if w == "sinks" else w for k, w in options.items()}
    return planted(torch, x, planted_bug or bug, **keywords), options


@pytest.mark.parametrize("bug", sorted(_SETUPS))
def test_each_planted_bug_is_rejected_and_named_first(torch, bug):
    case, options = _case(torch, bug)
    report = verify(**case, **options, layout="bhsd")
    assert not report.passed
    diagnosis = report.as_dict()["diagnosis"]
    assert diagnosis and diagnosis[0]["cause"] == bug, diagnosis
    assert diagnosis[0]["explained"], diagnosis


@pytest.mark.parametrize("setup", ["missing_sink", "window_offset", "softcap_order"])
def test_the_correct_kernel_passes_with_no_diagnosis(torch, setup):
    case, options = _case(torch, setup, planted_bug="none")  # no bug: FlashAttention's own
    report = verify(**case, **options, layout="bhsd")
    assert report.passed, report.summary()
    assert "diagnosis" not in report.as_dict() and report.blocks is None


def test_bfloat16_accumulation_is_named(torch):
    x = inputs(torch, torch.bfloat16, h=8, h_kv=8, n=256, m=256, d=64, seed=1)
    report = verify(**bf16_pv_accumulation(torch, x), layout="bhsd")
    diagnosis = report.as_dict()["diagnosis"]
    assert diagnosis[0]["cause"] == "dtype_accumulation", diagnosis


def test_a_dropped_key_block_lights_one_column_of_dk(torch, tmp_path):
    # dk's rows are keys: a kernel that zeroes keys 64..95 of dk shows in that key block alone
    x = inputs(torch, torch.float16, h=4, h_kv=2, n=64, m=512, d=32, seed=2, backward=True)

    case = correct(torch, x, lse=False)
    dk = case["dk"].astype(np.float32)
    dk[:, :, 256:384] = 0
    case["dk"] = dk.astype(np.float16)
    report = verify(**case, layout="bhsd")
    ratio = np.asarray(report.blocks["dk"]["ratio"])  # (h_kv, key blocks of 128)
    assert report.blocks["dk"]["rows"] == "key" and ratio.shape == (2, 4)
    assert (ratio[:, 2] > 1).all() and (ratio[:, [0, 1, 3]] <= 1).all()
    path = tmp_path / "dk.npz"
    np.savez(path, **case)
    result = CliRunner().invoke(app, ["verify", str(path), "--layout", "bhsd"])
    assert result.exit_code == 1
    assert "error / tolerance per head" in result.stdout
    table = result.stdout[result.stdout.index("dk: error / tolerance") :].splitlines()
    assert all(len(line) <= 80 for line in table[:4]), table


def test_infinite_errors_and_an_exact_minus_inf_lse_are_strings(torch):
    x = inputs(torch, torch.float16, h=2, h_kv=2, n=8, m=4, d=16, seed=3)
    case = planted(torch, x, None, causal=True)  # rows 0..3 see no key: lse -inf
    assert np.isneginf(case["lse"][0, 0, 0])
    case["out"] = case["out"].copy()
    case["out"][0, 0, 5, 0] = np.inf
    case["lse"] = case["lse"].copy()
    case["lse"][0, 1, 2] = 0.0  # finite where the exact lse is -inf: infinitely wrong
    report = json.loads(json.dumps(verify(**case, causal=True, layout="bhsd").as_dict()))
    out, lse = report["tensors"]["out"], report["tensors"]["lse"]
    assert out["max_abs_error"] == "inf" and out["worst"]["kernel"] == "inf"
    assert lse["max_abs_error"] == "inf" and lse["worst"]["exact"] == "-inf"
    assert (lse["worst"]["head"], lse["worst"]["row"]) == (1, 2)
    assert report["blocks"]["out"]["error_over_tolerance"][0][0] == "inf"


def test_a_gradient_off_by_a_constant_factor_is_named_scale(torch):
    x = inputs(torch, torch.float16, h=4, h_kv=2, n=64, m=64, d=32, seed=4, backward=True)

    case = correct(torch, x, lse=False)
    case["dk"] = (case["dk"].astype(np.float32) * 32**0.5).astype(np.float16)  # scale left out
    report = verify(**case, layout="bhsd")
    assert [n for n, t in report.tensors.items() if not t.passed] == ["dk"]
    first = report.diagnosis[0]
    assert first["cause"] == "scale" and first["explained"], report.diagnosis
    assert "5.657 x" in first["evidence"]  # sqrt(32): the factor named
