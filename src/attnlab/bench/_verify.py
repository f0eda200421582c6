"""What ``attnlab verify`` costs, beside torch's float64 SDPA on the same case.

Shape legend: B = 1 batch, h heads, N queries = keys, d = d_k = d_v.

A judge of kernels is used on every kernel change, so its price matters against the obvious
alternative: recomputing the case in float64 with torch (``scaled_dot_product_attention`` on
float64 tensors, forward and ``.backward()``). Each side runs in a fresh process, so its time
and memory are its own:

    attnlab   ``verify_file`` on a saved case (q, k, v, out, do, dq, dk, dv in the dtype):
              the exact float64 answer and the plain baseline in the kernel's dtype, judged
    torch     the float64 forward and backward of the same q, k, v, do

Reported per side: the wall time of the call (median over ``repeats``) and the process's peak
resident set (VmHWM: the interpreter and its libraries included, as a user sees it). The
case's outputs are random numbers of the right shape, so the case fails and verify's time
includes what a failure adds: the diagnosis (timed on its own, ``diagnosis_seconds``, beside
the rest, ``verdict_seconds``) and the other layout's forward for a hint.
torch is imported only in its own process. With ``scheduler`` (tcp://HOST:PORT), attnlab's
side runs ``verify_file(..., client=)`` on that Dask cluster: its time includes shipping the
parts and their answers, and its peak is the calling process's alone (each worker's is its own).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["verify_cost"]


def _peak_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _case(n: int, heads: int, d: int, dtype: str, causal: bool, backward: bool, path: Path):
    rng = np.random.default_rng(0)
    shape = (1, n, heads, d)  # (B, N, h, d): FlashAttention's layout
    names = ["q", "k", "v", "out"] + (["do", "dq", "dk", "dv"] if backward else [])
    arrays = {name: rng.standard_normal(shape).astype(dtype) for name in names}
    np.savez(path, causal=np.array(causal), **arrays)


def _run_attnlab(path: str, repeats: int, scheduler: str = "") -> dict:
    import contextlib

    from attnlab.verifier import _api, verify_file

    spent = []  # the diagnosis's seconds in each call, timed around the function verify calls
    diagnose = _api.diagnose

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return diagnose(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    _api.diagnose = timed

    with contextlib.ExitStack() as stack:
        client = None
        if scheduler:
            from distributed import Client

            client = stack.enter_context(Client(scheduler, set_as_default=False))
        times, diagnosis = [], []
        for _ in range(repeats):
            spent.clear()
            start = time.perf_counter()
            verify_file(path, client=client)
            times.append(time.perf_counter() - start)
            diagnosis.append(sum(spent))
    seconds, diag = statistics.median(times), statistics.median(diagnosis)
    return {"seconds": seconds, "runs": times, "peak_mib": _peak_bytes() / 2**20,
            "diagnosis_seconds": diag, "verdict_seconds": seconds - diag}  # fmt: skip


def _run_torch(path: str, repeats: int) -> dict:
    import torch

    with np.load(path) as data:
        causal = bool(data["causal"])
        t = {n: torch.from_numpy(data[n].astype(np.float64)).transpose(1, 2) for n in data.files
             if n in ("q", "k", "v", "do")}  # fmt: skip
    times = []
    for _ in range(repeats):
        q, k, v = (t[n].clone().requires_grad_("do" in t) for n in ("q", "k", "v"))
        start = time.perf_counter()
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if "do" in t:
            out.backward(t["do"])
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), "runs": times, "peak_mib": _peak_bytes() / 2**20}


def _in_process(side: str, path: Path, repeats: int, timeout_s: float, *extra: str) -> dict:
    code = (
        "import json, sys; from attnlab.bench import _verify as m; "
        f"print(json.dumps(m._run_{side}(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(path), str(repeats), *extra],
            capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout_s:g} s"}
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def verify_cost(
    n: int = 4096,
    heads: int = 8,
    d: int = 128,
    dtype: str = "float16",
    causal: bool = True,
    backward: bool = True,
    repeats: int = 1,
    use_torch: bool = True,
    timeout_s: float = 900.0,
    scheduler: str | None = None,
) -> dict:
    """Time ``verify_file`` and torch's float64 SDPA on one case, each in its own process
    (attnlab's on the Dask cluster at ``scheduler`` when given).

    Returns a dict: the case, ``attnlab`` and ``torch`` (seconds, runs, peak_mib, or error),
    and ``ratio`` (attnlab's seconds without the diagnosis over torch's)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "case.npz"
        _case(n, heads, d, dtype, causal, backward, path)
        result = {
            "case": {"B": 1, "N": n, "h": heads, "d": d, "dtype": dtype, "causal": causal,
                     "backward": backward, "scheduler": scheduler},
            "attnlab": _in_process("attnlab", path, repeats, timeout_s, *[scheduler or ""]),
        }  # fmt: skip
        if use_torch:
            result["torch"] = _in_process("torch", path, repeats, timeout_s)
    mine, theirs = result["attnlab"], result.get("torch", {})
    if "seconds" in mine and "seconds" in theirs and theirs["seconds"] > 0:
        # the verdict's time, as before the diagnosis existed: it runs on failures alone
        result["ratio"] = mine["verdict_seconds"] / theirs["seconds"]
    return result
