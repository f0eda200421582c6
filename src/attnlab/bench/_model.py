"""The model benchmark: a GPT-2-small-shaped forward pass in attnlab beside transformers.

Shape: 12 layers, d_model 768, 12 heads, vocabulary 50,257, float32, random weights that
transformers makes and saves to a temporary folder (``save_pretrained``), one batch of N
random token ids. attnlab loads the folder with ``attnlab.models.load`` and runs
``Model.run(ids, weights=False)``; transformers runs the same folder's eager forward
(``attn_implementation="eager"``, no attention weights returned, under ``torch.inference_mode``).

At each N both libraries load in processes of their own, so each peak resident memory
(``ru_maxrss``, the weights included) is its own; each takes one untimed run, then their
``repeats`` timed runs take turns (ABBA), so a busy spell on a shared machine falls on both,
and each time is the median of its runs. The
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
#: Seconds of quiet before each timed run: the other process's BLAS and OpenMP threads spin a
#: while after its run, on the same cores.
SETTLE = 0.5
#: The speed target: attnlab at least as fast as transformers' eager forward, at every N.
TARGET = 1.0


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
            verdict = "PASS" if ratio >= TARGET else "FAIL"
            lines.append(
                f"{n:>6} {ours['seconds'] * 1e3:>11.1f} {theirs['seconds'] * 1e3:>16.1f} "
                f"{ratio:>15.2f} {ours['peak_mib']:>12.0f} {theirs['peak_mib']:>17.0f} "
                f"{ours['max_diff']:>14.2e}  {verdict}"
            )
        lines.append(f"target: attnlab >= {TARGET}x transformers' speed at every N")
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


def _forward(library: str, folder: str, n: int):
    """One library's forward on the benchmark's N random ids: a call giving the last logit row."""
    import numpy as np

    ids = np.random.default_rng(0).integers(0, GPT2_SMALL["vocab_size"], size=(1, n))
    if library == "attnlab":
        from attnlab.models import load

        model = load(folder)
        return lambda: model.run(ids, weights=False).logits[0, -1]
    import torch
    import transformers

    net = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    tokens = torch.as_tensor(ids)

    def forward():
        with torch.inference_mode():
            return net(tokens).logits[0, -1].numpy()

    return forward


def serve_forward(library: str, folder: str, n: int) -> None:
    """Runs in a child process: load, one untimed run, then answer the parent line by line:
    ``run`` times one forward (prints its seconds), ``done`` prints the peak memory and the last
    logit row as JSON and returns."""
    forward = _forward(library, folder, n)
    last = forward()  # untimed: first-touch of the weights, caches, plans
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "run":
            start = time.perf_counter()
            last = forward()
            print(time.perf_counter() - start, flush=True)
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
            print(json.dumps({"peak_mib": peak, "last": last.tolist()}), flush=True)
            return


class _Side:
    """One library's forward in a process of its own, kept waiting between timed runs."""

    def __init__(self, library: str, folder: str, n: int):
        code = f"from attnlab.bench._model import serve_forward; serve_forward({library!r}, {folder!r}, {n})"
        self.library = library
        self.errors = tempfile.TemporaryFile(mode="w+")  # its stderr: progress bars, a failure
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )
        self._answer()  # "ready": loaded and run once

    def _answer(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.errors.seek(0)
            why = self.errors.read().strip()[-400:]
            self.close()
            raise RuntimeError(
                f"the {self.library} forward process ended (exit {self.proc.returncode}): {why}"
            )
        return line.strip()

    def timed(self) -> float:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return float(self._answer())

    def finish(self) -> dict:
        self.proc.stdin.write("done\n")
        self.proc.stdin.flush()
        result = json.loads(self._answer())
        self.proc.wait(timeout=60)  # it returns after that line
        self.close()
        return result

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.errors):
            f.close()


def _side_by_side(folder: str, n: int, repeats: int) -> dict:
    """Both libraries loaded in their own processes, their timed runs taking turns (ABBA, so
    neither always runs second): a busy spell on a shared machine falls on both alike."""
    sides = [_Side(lib, folder, n) for lib in ("attnlab", "transformers")]
    times: dict[str, list[float]] = {s.library: [] for s in sides}
    try:
        for r in range(repeats):
            for side in sides if r % 2 == 0 else sides[::-1]:
                time.sleep(SETTLE)
                times[side.library].append(side.timed())
        results = {s.library: s.finish() for s in sides}
    finally:
        for s in sides:
            s.close()
    for lib, r in results.items():
        r["seconds"] = statistics.median(times[lib])
    return results


def _save_model(folder: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(**GPT2_SMALL)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)


def _child(*args) -> dict:
    """bench._inside's measurements: ("inside", what, library, folder, repeats), in a process."""
    code = (
        "import json; from attnlab.bench._inside import inside_worker; "
        f"print(json.dumps(inside_worker(*{args[1:]!r})))"
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
            results = _side_by_side(tmp, n, repeats)
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
