"""FP8 cases: float8 q, k, v with descales, judged on the dequantised tensors.

The kernels here are written in the test: dequantise (stored value times the descale of its
key/value head), attend in float32 (numpy, or torch's SDPA), return bfloat16. One that forgets
the descales must fail.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.verifier import verify_file
from attnlab.verifier._api import _judged
from attnlab.verifier._options import CaseError

B, N, M, H, H_KV, D = 2, 6, 9, 4, 2, 16
BF16 = ml_dtypes.bfloat16


def _inputs(seed=0, fmt=ml_dtypes.float8_e4m3fn):
    rng = np.random.default_rng(seed)
    q, k, v = (
        (rng.standard_normal((B, n, h, D)) * 8).astype(fmt)
        for n, h in ((N, H), (M, H_KV), (M, H_KV))
    )
    scales = {f"{x}_descale": rng.uniform(0.02, 0.2, (B, H_KV)).astype(np.float32) for x in "qkv"}
    return q, k, v, scales


def _numpy_kernel(q, k, v, scales, causal=False, use_descales=True):
    """Dequantise, attend in float32 head by head, round the output to bfloat16."""
    out = np.zeros((B, N, H, D), np.float32)
    for b in range(B):
        for i in range(H):
            g = i // (H // H_KV)
            one = {"q_descale": 1.0, "k_descale": 1.0, "v_descale": 1.0}
            s_ = {n: (float(x[b, g]) if use_descales else one[n]) for n, x in scales.items()}
            qs = q[b, :, i].astype(np.float32) * np.float32(s_["q_descale"])
            ks = k[b, :, g].astype(np.float32) * np.float32(s_["k_descale"])
            vs = v[b, :, g].astype(np.float32) * np.float32(s_["v_descale"])
            sc = qs @ ks.T / np.float32(np.sqrt(D))
            if causal:
                sc[np.arange(M)[None, :] > np.arange(N)[:, None] + M - N] = -np.inf
            w = np.exp(sc - sc.max(axis=1, keepdims=True))
            out[b, :, i] = (w / w.sum(axis=1, keepdims=True)) @ vs
    return out.astype(BF16)


@pytest.mark.parametrize("causal", [False, True])
def test_a_correct_fp8_kernel_passes_and_one_without_descales_fails(causal):
    q, k, v, scales = _inputs()
    entries = {"q": q, "k": k, "v": v, **scales, "causal": np.array(causal)}
    good = _judged({**entries, "out": _numpy_kernel(q, k, v, scales, causal)}, "bshd")
    assert good.passed, good.summary()
    assert good.dtype == "float8_e4m3fn" and good.tensors["out"].baseline_dtype == "bfloat16"
    dropped = _numpy_kernel(q, k, v, scales, causal, use_descales=False)
    bad = _judged({**entries, "out": dropped}, "bshd")
    assert not bad.passed


@pytest.mark.oracle
def test_a_torch_fp8_kernel_passes_from_a_safetensors_dump(torch, tmp_path):
    from safetensors.torch import save_file

    q, k, v, scales = _inputs(seed=1)
    tq, tk, tv = (torch.from_numpy(x.view(np.uint8).copy()).view(torch.float8_e4m3fn)
                  for x in (q, k, v))  # fmt: skip
    ts = {n: torch.from_numpy(x) for n, x in scales.items()}
    per_q = ts["q_descale"].repeat_interleave(H // H_KV, dim=1)[:, None, :, None]
    deq = (
        tq.float() * per_q,
        tk.float() * ts["k_descale"][:, None, :, None],
        tv.float() * ts["v_descale"][:, None, :, None],
    )
    out = torch.nn.functional.scaled_dot_product_attention(
        *(x.transpose(1, 2) for x in deq), enable_gqa=True
    ).transpose(1, 2)
    dump = {"q": tq, "k": tk, "v": tv, **ts, "out": out.to(torch.bfloat16).contiguous()}
    save_file(dump, str(tmp_path / "fp8.safetensors"))
    assert verify_file(tmp_path / "fp8.safetensors").passed
    dump["out"] = (
        torch.nn.functional.scaled_dot_product_attention(
            *(x.float().transpose(1, 2) for x in (tq, tk, tv)), enable_gqa=True
        )
        .transpose(1, 2)
        .to(torch.bfloat16)
        .contiguous()
    )  # the descales forgotten
    save_file(dump, str(tmp_path / "forgot.safetensors"))
    result = CliRunner().invoke(app, ["verify", str(tmp_path / "forgot.safetensors")])
    assert result.exit_code == 1, result.output


def test_an_npz_dump_names_its_float8_bytes_by_fp8_format(tmp_path):
    q, k, v, scales = _inputs(seed=2, fmt=ml_dtypes.float8_e5m2)
    out = _numpy_kernel(q, k, v, scales)
    path = tmp_path / "fp8.npz"
    raw = {n: x.view(np.uint8) for n, x in (("q", q), ("k", k), ("v", v))}
    np.savez(path, **raw, **scales, out=out, fp8_format=np.array("float8_e5m2"))
    result = CliRunner().invoke(app, ["verify", str(path)])
    assert result.exit_code == 0, result.output
    np.savez(path, **raw, **scales, out=out)  # bytes with no format: uint8 is no float
    result = CliRunner().invoke(app, ["verify", str(path)])
    assert result.exit_code == 2 and "q: expected float8_e4m3fn or float8_e5m2" in result.output
    np.savez(path, **raw, out=out)  # no descale and no format: nothing says FP8
    result = CliRunner().invoke(app, ["verify", str(path)])
    assert result.exit_code == 2 and "add fp8_format" in result.output


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"k_descale": np.ones((B, H_KV + 1))}, r"k_descale to be a scalar or of shape"),
        ({"q_descale": np.float32(-2.0)}, "q_descale finite and >= 0"),
        ({"v_descale": np.full((B, H_KV), np.nan)}, "v_descale finite"),
        ({"out": np.zeros((B, N, H, D), ml_dtypes.float8_e4m3fn)}, "out: expected bfloat16"),
        ({"do": np.zeros((B, N, H, D), BF16)}, "do: not an entry of an FP8 case"),
        ({"fp8_format": np.array("e4m3")}, "fp8_format: expected one of"),
        ({"cu_seqlens_q": np.array([0, N])}, "cu_seqlens_q: not an entry of an FP8 case"),
    ],
)
def test_bad_fp8_entries_raise_one_case_error_naming_them(change, words):
    q, k, v, scales = _inputs()
    entries = {"q": q, "k": k, "v": v, **scales, "out": np.zeros((B, N, H, D), BF16)}
    with pytest.raises(CaseError, match=words):
        _judged({**entries, **change}, "bshd")


def test_the_sdpa_layout_reads_descales_per_kv_head_too():
    q, k, v, scales = _inputs(seed=4)
    out = _numpy_kernel(q, k, v, scales, causal=True)

    def heads_first(x):
        return np.ascontiguousarray(np.swapaxes(x, 1, 2))  # (B, N, h, d) -> (B, h, N, d)

    entries = {n: heads_first(x) for n, x in (("q", q), ("k", k), ("v", v), ("out", out))}
    entries["causal"] = np.array(True)
    assert _judged({**entries, **scales}, "bhsd").passed
    swapped = {n: x[::-1].copy() for n, x in scales.items()}  # the sequences' descales swapped
    assert not _judged({**entries, **swapped}, "bhsd").passed
