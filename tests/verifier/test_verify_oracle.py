"""attnlab verify against PyTorch: SDPA stands in for a kernel, its tensors dumped the way
docs/verify.md tells a kernel engineer to (safetensors.torch.save_file), forward and backward,
in float32, float16 and bfloat16; a bug planted in it must be caught and placed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.verifier import verify_file

pytestmark = pytest.mark.oracle


def _sdpa_case(torch, dtype, *, n=48, m=64, h=4, h_kv=2, d=32, window=None, seed=0):
    """q, k, v in ``dtype`` (B, N, h, d); SDPA in float32 as the kernel, rounded to ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, n, h, d, generator=g).to(dtype)
    k = torch.randn(2, m, h_kv, d, generator=g).to(dtype)
    v = torch.randn(2, m, h_kv, d, generator=g).to(dtype)
    do = torch.randn(2, n, h, d, generator=g).to(dtype)
    i = torch.arange(n)[:, None] + m - n
    j = torch.arange(m)[None, :]
    allowed = j <= i  # FlashAttention's causal, bottom-right
    if window is not None:
        allowed &= j >= i - window
    leaves = [x.float().transpose(1, 2).requires_grad_() for x in (q, k, v)]  # (B, h, N, d)
    out = torch.nn.functional.scaled_dot_product_attention(
        *leaves, attn_mask=allowed, enable_gqa=True
    )
    dq, dk, dv = torch.autograd.grad(out, leaves, do.float().transpose(1, 2))
    seq = [x.transpose(1, 2).to(dtype).contiguous() for x in (out, dq, dk, dv)]
    return dict(
        zip(("q", "k", "v", "do", "out", "dq", "dk", "dv"), (q, k, v, do, *seq), strict=True)
    )


def _save(torch, tmp_path, case, **options):
    from safetensors.torch import save_file

    path = tmp_path / "case.safetensors"
    save_file({**case, **{n: torch.tensor(x) for n, x in options.items()}}, str(path))
    return path


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_sdpa_passes_forward_and_backward(torch, tmp_path, name):
    case = _sdpa_case(torch, getattr(torch, name))
    path = _save(torch, tmp_path, case, causal=True)
    result = CliRunner().invoke(app, ["verify", str(path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["dtype"] == name and set(report["tensors"]) == {"out", "dq", "dk", "dv"}


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_a_bug_in_one_key_row_of_dk_is_caught_and_placed(torch, tmp_path, name):
    case = _sdpa_case(torch, getattr(torch, name))
    case["dk"][1, 37, 1] += 0.5  # batch 1, key row 37, key/value head 1
    report = verify_file(_save(torch, tmp_path, case, causal=True))
    assert [t for t in report.tensors if not report.tensors[t].passed] == ["dk"]
    w = report.tensors["dk"].worst
    assert (w["batch"], w["row"], w["head"]) == (1, 37, 1)


def test_a_window_one_key_too_wide_fails_in_float16(torch, tmp_path):
    case = _sdpa_case(torch, torch.float16, window=9)
    path = _save(torch, tmp_path, case, window_size=np.array([8, 0], dtype=np.int64))
    report = verify_file(path)
    assert not report.tensors["out"].passed
    assert report.tensors["out"].worst["row"] >= 8 - (64 - 48)  # rows that reach key 0 agree


def test_the_baseline_errs_like_torch_in_the_kernels_dtype(torch, tmp_path):
    # The yardstick: attnlab's plain float16 attention should err about as much as PyTorch's
    # own float16 attention does against float64 (FlashAttention's attention_ref upcast=False).
    case = _sdpa_case(torch, torch.float16, h_kv=4)
    q, k, v = (case[n].transpose(1, 2) for n in ("q", "k", "v"))  # (B, h, N, d) float16
    n, m = q.shape[-2], k.shape[-2]
    allowed = torch.arange(m)[None, :] <= torch.arange(n)[:, None] + m - n
    exact = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=allowed
    )
    scores = (q @ (k * q.shape[-1] ** -0.5).transpose(-1, -2)).masked_fill(~allowed, -torch.inf)
    plain = torch.softmax(scores.float(), -1).half() @ v
    torch_error = (plain.double() - exact).abs().max().item()
    report = verify_file(_save(torch, tmp_path, case, causal=True))
    ours = report.tensors["out"].baseline_error
    assert torch_error / 3 < ours < torch_error * 3, (ours, torch_error)
