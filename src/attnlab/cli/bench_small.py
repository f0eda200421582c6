"""``attnlab bench small``: attnlab beside torch's SDPA at small batched shapes (its own module;
``cli/bench.py`` registers the command on its ``bench`` sub-app)."""

from __future__ import annotations

from typing import Annotated

import typer

from attnlab.cli._app import console, err_console, fail, friendly_errors

#: The largest shape side accepted: the fast path this benchmark watches is for small problems.
MAX_SIDE = 4096
#: Seconds of timed blocks and pauses a run may take without --yes (the default run: about 12 s).
LONG_S = 120.0


def _shapes(values: list[str] | None):
    if not values:
        return None
    out = []
    for value in values:
        parts = [p.strip() for p in value.split(",")]
        if len(parts) != 4 or not all(p.isascii() and p.isdigit() and len(p) <= 5 for p in parts):
            raise fail(
                f"--shape: expected four whole numbers B,h,N,d such as 64,4,32,16, but got {value[:40]!r}"
            )
        shape = tuple(int(p) for p in parts)
        if not all(1 <= x <= MAX_SIDE for x in shape):
            raise fail(f"--shape: expected sizes from 1 to {MAX_SIDE}, but got {value!r}")
        out.append(shape)
    return out


@friendly_errors
def small_command(
    shape: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="A shape B,h,N,d to time (repeat the option). Default: 64,4,32,16; 8,8,128,64; "
            "1,8,512,64 and the worked example 1,1,4,2.",
        ),
    ] = None,
    rounds: Annotated[
        int, typer.Option(min=1, max=1000, help="Interleaved timed blocks per call and shape.")
    ] = 7,
    block_ms: Annotated[
        float, typer.Option(min=0.1, max=10_000, help="Length of each timed block in ms.")
    ] = 20.0,
    torch: Annotated[bool, typer.Option(help="Time PyTorch's SDPA beside attnlab.")] = True,
    isolate: Annotated[bool, typer.Option(help="Run each shape in its own process.")] = True,
    yes: Annotated[
        bool, typer.Option("--yes", help=f"Run even when the blocks pass {LONG_S:.0f} s.")
    ] = False,
) -> None:
    """Time attention and a training step (forward + backward) at small batched shapes beside
    torch SDPA, and check the small-shape targets."""
    from attnlab.bench import _small

    shapes = _shapes(shape) or _small.SHAPES
    calls = sum(1 for c in _small.CALLS if torch or not c.startswith("torch"))
    seconds = len(shapes) * calls * rounds * (block_ms / 1e3 + _small.GAP_S)
    if seconds > LONG_S and not yes:
        raise fail(
            f"--rounds, --block-ms: expected at most {LONG_S:.0f} s of timed blocks, but "
            f"{len(shapes)} shape(s) x {calls} calls x {rounds} rounds of {block_ms:g} ms (and "
            f"{_small.GAP_S * 1e3:.0f} ms pauses) take {seconds / 60:,.1f} min; add --yes"
        )

    def progress(row) -> None:
        done = row.error or "done"
        err_console.print(f"[dim]  {row.shape}: {done}[/]", highlight=False)

    report = _small.small(
        shapes,
        rounds=rounds,
        use_torch=torch,
        isolate=isolate,
        block_s=block_ms / 1e3,
        progress=progress,
    )
    text = (
        report.format()
        .replace("  PASS  ", "  [green]PASS[/]  ")
        .replace("  FAIL  ", "  [red]FAIL[/]  ")
    )
    console.print(text, highlight=False, soft_wrap=True)
    if all(row.error for row in report.rows):
        raise fail("expected at least one shape measured, but every shape failed", code=1)
