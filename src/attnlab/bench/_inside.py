"""The inside-a-model benchmarks of ``attnlab bench model``, on the same GPT-2-small-shaped
folder as its forward pass (float32, batch 1):

    cache     ``Model.run(ids, cache=True)`` over the plain run, N = 256 (target at most 1.3x)
    patch     ``patch(..., over="heads")`` at N = 64: 12 x 12 = 144 patched runs, beside the
              same sweep in transformers with torch forward pre-hooks on ``c_proj`` (each run
              there recomputes every layer); target attnlab at least 1.5x as fast
    generate  greedy, a 32-token prompt and 64 new tokens: ``Model.generate`` (key/value cache)
              beside transformers' ``generate(do_sample=False)``; target at least 1.0x the
              tokens/s; the two outputs are compared token for token

Each (measurement, library) runs in its own process, so its peak resident memory is its own.
"""

from __future__ import annotations

import resource
import statistics
import time

__all__ = ["INSIDE_TARGETS", "inside_rows", "inside_worker"]

#: (what, the target, how the ratio reads) of each measurement.
INSIDE_TARGETS = {
    "cache": (1.3, "cache/plain time, at most"),
    "patch": (1.5, "x transformers, at least"),
    "generate": (1.0, "x transformers tokens/s, at least"),
}
PATCH_N, PROMPT, NEW, CACHE_N = 64, 32, 64, 256


def _timed(fn, repeats: int, warm: bool = True):
    last = fn() if warm else None  # untimed: first touch of the weights, plans
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        last = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), last


def _turns(first, second, repeats: int) -> tuple[float, float]:
    """Median seconds of two calls whose timed runs take turns (ABBA), after one untimed run
    each: a busy spell on a shared machine falls on both."""
    first(), second()
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(repeats):
        for k in (0, 1) if r % 2 == 0 else (1, 0):
            start = time.perf_counter()
            (first, second)[k]()
            times[k].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def _peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)


def inside_worker(what: str, library: str, folder: str, repeats: int) -> dict:
    """Runs in a child process: one measurement of one library."""
    import numpy as np

    rng = np.random.default_rng(0)
    if library == "attnlab":
        from attnlab.models import load, patch

        model = load(folder)
        if what == "cache":
            ids = rng.integers(0, model.shape.vocab, size=(1, CACHE_N))
            plain, seconds = _turns(
                lambda: model.run(ids, weights=False).logits,
                lambda: model.run(ids, cache=True, weights=False).cache,
                repeats,
            )
            return {"seconds": seconds, "plain": plain, "peak_mib": _peak()}
        if what == "patch":
            clean, corrupt = rng.integers(0, model.shape.vocab, size=(2, 1, PATCH_N))
            seconds, table = _timed(
                lambda: patch(model, clean, corrupt, lambda x: float(x[0, -1, 0] - x[0, -1, 1])),
                repeats,
                warm=False,  # 144 runs: the first of them warms the rest
            )
            return {"seconds": seconds, "peak_mib": _peak(), "last": table.ravel().tolist()}
        ids = rng.integers(0, model.shape.vocab, size=(1, PROMPT))
        seconds, out = _timed(lambda: model.generate(ids, NEW), repeats)
        return {"seconds": seconds, "peak_mib": _peak(), "last": out[0, PROMPT:].tolist()}
    return _torch_worker(what, folder, repeats, rng)


def _torch_worker(what: str, folder: str, repeats: int, rng) -> dict:
    import torch
    import transformers

    net = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    vocab = net.config.vocab_size
    if what == "patch":
        clean, corrupt = (torch.as_tensor(x) for x in rng.integers(0, vocab, size=(2, 1, PATCH_N)))
        seconds, table = _timed(lambda: _torch_sweep(net, clean, corrupt), repeats, warm=False)
        return {"seconds": seconds, "peak_mib": _peak(), "last": table}
    ids = torch.as_tensor(rng.integers(0, vocab, size=(1, PROMPT)))
    net.generation_config.eos_token_id = None
    net.generation_config.pad_token_id = 0

    def run():
        with torch.inference_mode():
            return net.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False
            )

    seconds, out = _timed(run, repeats)
    return {"seconds": seconds, "peak_mib": _peak(), "last": out[0, PROMPT:].tolist()}


def _torch_sweep(net, clean, corrupt) -> list[float]:
    """Patch every head's input slice of c_proj from the clean run into the corrupted one."""
    import torch

    blocks, heads = net.transformer.h, net.config.n_head
    d = net.config.n_embd // heads
    seen = {}
    handles = [
        b.attn.c_proj.register_forward_pre_hook(
            lambda mod, args, i=i: seen.__setitem__(i, args[0].clone())
        )
        for i, b in enumerate(blocks)
    ]
    with torch.inference_mode():
        net(clean)
    for h in handles:
        h.remove()
    out = []
    for i, b in enumerate(blocks):
        for head in range(heads):
            cut = slice(head * d, (head + 1) * d)

            def put(mod, args, i=i, cut=cut):
                x = args[0].clone()
                x[..., cut] = seen[i][..., cut]
                return (x,)

            handle = b.attn.c_proj.register_forward_pre_hook(put)
            with torch.inference_mode():
                logits = net(corrupt).logits
            handle.remove()
            out.append(float(logits[0, -1, 0] - logits[0, -1, 1]))
    return out


def inside_rows(folder: str, repeats: int, child, progress=None) -> list[dict]:
    """One row per measurement: times, the ratio against its target, peaks, agreement."""
    import numpy as np

    rows = []
    for what in INSIDE_TARGETS:
        ours = child("inside", what, "attnlab", folder, repeats)
        if what == "cache":
            row = {"what": what, "attnlab_s": ours["seconds"], "other_s": ours["plain"],
                   "ratio": ours["seconds"] / ours["plain"], "attnlab_mib": ours["peak_mib"],
                   "other_mib": None, "agree": None}  # fmt: skip
        else:
            theirs = child("inside", what, "transformers", folder, repeats)
            a, b = np.asarray(ours["last"]), np.asarray(theirs["last"])
            agree = (
                f"{int((a == b).sum())}/{a.size} tokens"
                if what == "generate"
                else f"max |Δ| {np.abs(a - b).max():.1e}"
            )
            row = {"what": what, "attnlab_s": ours["seconds"], "other_s": theirs["seconds"],
                   "ratio": theirs["seconds"] / ours["seconds"], "attnlab_mib": ours["peak_mib"],
                   "other_mib": theirs["peak_mib"], "agree": agree}  # fmt: skip
        rows.append(row)
        if progress is not None:
            progress({"library": what, "n": "-", "seconds": row["attnlab_s"]})
    return rows
