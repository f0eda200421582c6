"""The model benchmark: a GPT-2-small-shaped forward pass in attnlab beside transformers.

Shape: 12 layers, d_model 768, 12 heads, vocabulary 50,257, float32, random weights that
transformers makes and saves to a temporary folder (``save_pretrained``), one batch of N
random token ids. attnlab loads the folder with ``attnlab.models.load`` and runs
``Model.run(ids, weights=False)``; transformers runs the same folder's eager forward
(``attn_implementation="eager"``, no attention weights returned, under ``torch.inference_mode``).

Each (library, N) runs in its own process, so its peak resident memory (``ru_maxrss``, the
weights included) is its own; each takes one untimed run, then the median of ``repeats``. The
two logits tables are compared (largest difference) so the times are of the same numbers.
torch runs on as many threads as the machine has cores, as OpenBLAS does for attnlab.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnlab.bench._suite import machine_info

__all__ = ["GPT2_SMALL", "ModelReport", "model"]

GPT2_SMALL = {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
DEFAULT_NS = (256, 1024)
#: The speed target: attnlab at least half as fast as transformers' eager forward at N = 256.
TARGET = 0.5


@dataclass
class ModelReport:
    rows: list[dict] = field(default_factory=list)  # {n, library, seconds, peak_mib, ...}
    machine: dict = field(default_factory=dict)
    inside: list[dict] = field(default_factory=list)  # bench._inside's rows

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self) -> str:
        lines = [
            "GPT-2-small-shaped forward, float32, batch 1 (times: medians; peak: process RSS)",
            f"{'N':>6} {'attnlab ms':>11} {'transformers ms':>16} {'x transformers':>15} "
            f"{'attnlab MiB':>12} {'transformers MiB':>17} {'max |Δ logit|':>14}",
        ]
        for n in sorted({r["n"] for r in self.rows}):
            ours = next(r for r in self.rows if r["n"] == n and r["library"] == "attnlab")
            theirs = next(r for r in self.rows if r["n"] == n and r["library"] == "transformers")
            ratio = theirs["seconds"] / ours["seconds"]
            verdict = ("PASS" if ratio >= TARGET else "FAIL") if n == 256 else ""
            lines.append(
                f"{n:>6} {ours['seconds'] * 1e3:>11.1f} {theirs['seconds'] * 1e3:>16.1f} "
                f"{ratio:>15.2f} {ours['peak_mib']:>12.0f} {theirs['peak_mib']:>17.0f} "
                f"{ours['max_diff']:>14.2e}  {verdict}"
            )
        lines.append(f"target: attnlab >= {TARGET}x transformers' speed at N = 256")
        return "\n".join(lines + _inside_lines(self.inside))


def _inside_lines(rows: list[dict]) -> list[str]:
    from attnlab.bench._inside import INSIDE_TARGETS

    if not rows:
        return []
    lines = [
        "",
        "Inside the model: cache (N = 256), patch over heads (N = 64, 144 runs), greedy "
        "generate (32 + 64 tokens)",
        f"{'what':>9} {'attnlab ms':>11} {'other ms':>10} {'ratio':>7} {'attnlab MiB':>12} "
        f"{'other MiB':>10}  target",
    ]
    for r in rows:
        target, words = INSIDE_TARGETS[r["what"]]
        ok = r["ratio"] <= target if r["what"] == "cache" else r["ratio"] >= target
        other = "-" if r["other_mib"] is None else f"{r['other_mib']:.0f}"
        lines.append(
            f"{r['what']:>9} {r['attnlab_s'] * 1e3:>11.1f} {r['other_s'] * 1e3:>10.1f} "
            f"{r['ratio']:>7.2f} {r['attnlab_mib']:>12.0f} {other:>10}  {words} {target} "
            f"{'PASS' if ok else 'FAIL'}{'; ' + r['agree'] if r['agree'] else ''}"
        )
    lines.append("cache's other column is the plain run; patch's and generate's transformers'")
    return lines


def _worker(library: str, folder: str, n: int, repeats: int) -> dict:
    """Runs in a child process: time one library's forward on N tokens."""
    import numpy as np

    ids = np.random.default_rng(0).integers(0, GPT2_SMALL["vocab_size"], size=(1, n))
    if library == "attnlab":
        from attnlab.models import load

        model = load(folder)

        def forward():
            return model.run(ids, weights=False).logits[0, -1]
    else:
        import torch
        import transformers

        net = transformers.AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        tokens = torch.as_tensor(ids)

        def forward():
            with torch.inference_mode():
                return net(tokens).logits[0, -1].numpy()

    last = forward()  # untimed: first-touch of the weights, caches, plans
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        last = forward()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    return {"seconds": statistics.median(times), "peak_mib": peak, "last": last.tolist()}


def _save_model(folder: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(**GPT2_SMALL)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)


def _child(*args) -> dict:
    worker = "_worker"
    if args[0] == "inside":  # ("inside", what, library, folder, repeats): bench._inside's
        worker, args = "inside_worker", args[1:]
    module = "attnlab.bench._inside" if worker == "inside_worker" else "attnlab.bench._model"
    code = (
        f"import json, sys; from {module} import {worker}; print(json.dumps({worker}(*{args!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the {args[:2]} run failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def model(ns=DEFAULT_NS, repeats: int = 3, progress=None, inside: bool = True) -> ModelReport:
    """Time both libraries at each N (see the module docstring), then, with ``inside``, the
    cache, patching and generation (``attnlab.bench._inside``). Needs torch and
    transformers."""
    import numpy as np

    report = ModelReport(machine=machine_info())
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-model-") as tmp:
        subprocess.run(
            [sys.executable, "-c", f"from attnlab.bench._model import _save_model; from pathlib import Path; _save_model(Path({tmp!r}))"],
            check=True, capture_output=True,
        )  # fmt: skip
        for n in ns:
            results = {lib: _child(lib, tmp, n, repeats) for lib in ("attnlab", "transformers")}
            diff = float(
                np.abs(
                    np.subtract(results["attnlab"]["last"], results["transformers"]["last"])
                ).max()
            )
            for lib, r in results.items():
                row = {
                    "n": n,
                    "library": lib,
                    "seconds": r["seconds"],
                    "peak_mib": r["peak_mib"],
                    "max_diff": diff,
                }
                report.rows.append(row)
                if progress is not None:
                    progress(row)
        if inside:
            from attnlab.bench._inside import inside_rows

            report.inside = inside_rows(tmp, repeats, _child, progress)
    return report
