"""A failing verdict that is a layout mix-up says so and names the other --layout.

The kernel outputs come from tests/verify_reference.py (independent float64 numpy).
"""

from __future__ import annotations

import numpy as np

from attnlab.verifier import verify
from verify_reference import inputs, reference


def _bshd(seed=0, n=24, h=4):
    q, k, v = inputs(np.random.default_rng(seed), n=n, m=n, h=h, h_kv=h)
    out = reference(q, k, v, causal=True)["out"].astype(np.float32)
    return q, k, v, out


def _to_bhsd(*xs):
    return [np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in xs]


def test_a_correct_bhsd_kernel_read_as_bshd_fails_with_a_hint_naming_bhsd():
    q, k, v, out = _to_bhsd(*_bshd())  # (B, h=4, N=24, d), SDPA's layout
    report = verify(q=q, k=k, v=v, out=out, causal=True)  # read as bshd: 24 "heads"
    assert not report.passed
    assert report.shape["heads"] == 24
    assert any("--layout bhsd" in h for h in report.hints), report.hints
    assert "--layout bhsd" in report.summary()
    assert report.as_dict()["hints"] == list(report.hints)
    assert verify(q=q, k=k, v=v, out=out, causal=True, layout="bhsd").passed


def test_an_output_written_in_the_other_layout_is_named():
    q, k, v, out = _bshd(1)
    # The kernel's out memory is laid out (B, h, N, d) while it claims (B, N, h, d).
    wrong = np.ascontiguousarray(out.transpose(0, 2, 1, 3)).reshape(out.shape)
    report = verify(q=q, k=k, v=v, out=wrong, causal=True)
    assert not report.passed
    assert any(h.startswith("out is right read as bhsd") for h in report.hints), report.hints


def test_a_plain_wrong_output_gets_no_layout_hint():
    q, k, v, out = _bshd(2)
    out[0, 3, 1] += 0.5
    report = verify(q=q, k=k, v=v, out=out, causal=True)
    assert not report.passed and report.hints == ()


def test_cli_prints_the_hint(tmp_path):
    from typer.testing import CliRunner

    from attnlab.cli import app

    q, k, v, out = _to_bhsd(*_bshd(3))
    path = tmp_path / "sdpa.npz"
    np.savez(path, q=q, k=k, v=v, out=out, causal=True)
    result = CliRunner().invoke(app, ["verify", str(path)])
    assert result.exit_code == 1 and "pass --layout bhsd" in " ".join(result.stdout.split())
    assert CliRunner().invoke(app, ["verify", str(path), "--layout", "bhsd"]).exit_code == 0


def _with_grads(seed: int):
    """A float32 kernel's q, k, v, out, do, dq, dk, dv in bshd, right to float64's rounding."""
    q, k, v = inputs(np.random.default_rng(seed), n=24, m=24, h=4, h_kv=4)
    do = np.random.default_rng(seed + 1).standard_normal(q.shape).astype(np.float32)
    ref = reference(q, k, v, causal=True, do=do)
    arrays = {"q": q, "k": k, "v": v, "do": do}
    arrays.update({name: ref[name].astype(np.float32) for name in ("out", "dq", "dk", "dv")})
    return arrays


def _count_backwards(monkeypatch) -> list:
    from attnlab.verifier import _truth

    calls = []
    real = _truth.attention_backward

    def counted(q, *args, **kwargs):
        calls.append(q.shape)  # (h_kv, g, N, d_k)
        return real(q, *args, **kwargs)

    monkeypatch.setattr(_truth, "attention_backward", counted)
    return calls


def test_a_case_whose_forward_fails_in_the_other_layout_skips_its_backward(monkeypatch):
    a = _with_grads(4)
    a["dq"][0, 3, 1] += 0.5  # a wrong gradient: the case fails as bshd
    calls = _count_backwards(monkeypatch)
    report = verify(**a, causal=True)
    assert not report.passed and report.hints == ()
    # only the case's own backward ran: read as bhsd (24 heads of 4 rows) its out already fails
    assert [shape[2] for shape in calls] == [24, 24]  # one call per sequence, 24 rows each


def test_a_correct_bhsd_kernel_with_gradients_still_gets_its_hint(monkeypatch):
    a = {name: _to_bhsd(x)[0] for name, x in _with_grads(5).items()}  # SDPA's layout
    calls = _count_backwards(monkeypatch)
    report = verify(**a, causal=True)  # read as bshd: 24 "heads" of 4 rows
    assert not report.passed
    assert any("--layout bhsd" in h for h in report.hints), report.hints
    assert len(calls) == 4  # both layouts' backwards: the forward passed read as bhsd
    assert verify(**a, causal=True, layout="bhsd").passed
