"""The cost model of multi-head attention (§6.6), as plain integer functions.

Counts are multiply-adds unless ``count="flops"``, which counts a multiply and an add separately
(twice as many; the comparison is unchanged). Source: §6.6 of the chapter, after Vaswani et al.
(2017), Table 1. The softmax and the masks are small (O(N²) cheap operations) and left out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from html import escape

import numpy as np

from attnlab.core._checks import positive_int
from attnlab.errors import AttnlabError

__all__ = ["CostBreakdown", "breakdown", "crossover_length", "mha_flops", "score_memory_bytes"]


def _factor(count: str) -> int:
    if count not in ("madds", "flops"):
        raise AttnlabError(f"expected count 'madds' or 'flops', but got {count!r} instead")
    return 1 if count == "madds" else 2


@dataclass(frozen=True)
class CostBreakdown:
    """The four terms of §6.6 for N tokens at width d_model."""

    n: int
    d_model: int
    count: str  # "madds" or "flops"
    projections: int  # Q, K, V for all heads: 3 N d_model²
    scores: int  # Q Kᵀ over all heads: N² d_model
    weighted_sum: int  # A V over all heads: N² d_model
    output_projection: int  # W^O: N d_model²

    @property
    def linear(self) -> int:
        """The terms that grow with N: 4 N d_model²."""
        return self.projections + self.output_projection

    @property
    def quadratic(self) -> int:
        """The terms that grow with N²: 2 N² d_model."""
        return self.scores + self.weighted_sum

    @property
    def total(self) -> int:
        return self.linear + self.quadratic

    @property
    def quadratic_share(self) -> float:
        """Share of the total in the N² terms: N / (N + 2 d_model)."""
        return self.quadratic / self.total

    def as_dict(self) -> dict:
        """Every field, then the four totals derived from them."""
        derived = ("linear", "quadratic", "total", "quadratic_share")
        return dataclasses.asdict(self) | {name: getattr(self, name) for name in derived}

    def summary(self) -> list[str]:
        """Two sentences: where the count goes, and which side of the crossover N is on."""
        side = "past" if self.n > 2 * self.d_model else "not past"
        return [
            f"At N = {self.n} and d_model = {self.d_model} the N² terms (Q Kᵀ and A V) are "
            f"{self.quadratic_share:.1%} of {self.total:,} {self._unit()}.",
            f"N is {side} the crossover 2·d_model = {2 * self.d_model}, where the N² terms "
            "overtake the projections.",
        ]

    def _unit(self) -> str:
        return "multiply-adds" if self.count == "madds" else "FLOPs"

    def _repr_html_(self) -> str:
        """Jupyter: the four terms as a table, the summary, and their shares as one bar.

        The bar is plain HTML and CSS (no script, nothing to load), so it shows offline, in
        an untrusted notebook and in a static export alike; the core imports nothing above it.
        """
        terms = [("Q, K, V projections", "3·N·d²", self.projections, "#4c78a8"),
                 ("scores Q Kᵀ", "N²·d", self.scores, "#f58518"),
                 ("weighted sum A V", "N²·d", self.weighted_sum, "#e45756"),
                 ("output projection Wᴼ", "N·d²", self.output_projection, "#72b7b2")]  # fmt: skip
        rows = "".join(
            f"<tr><td>{name}</td><td>{formula}</td><td>{count:,}</td>"
            f"<td>{count / self.total:.1%}</td></tr>"
            for name, formula, count, _ in terms
        )
        bar = "".join(
            f'<div title="{name}: {count / self.total:.1%}" style="width:{count / self.total:.4%};'
            f'background:{colour}"></div>'
            for name, _, count, colour in terms
        )
        words = "".join(f"<p>{escape(line)}</p>" for line in self.summary())
        return (
            f'<div class="attnlab-cost"><p><strong>Cost of one multi-head attention layer '
            f"({self._unit()})</strong></p><table><thead><tr><th>term</th><th>formula</th>"
            f"<th>{self._unit()}</th><th>share</th></tr></thead><tbody>{rows}<tr><td>total"
            f"</td><td>4·N·d² + 2·N²·d</td><td>{self.total:,}</td><td>100%</td></tr></tbody>"
            f'</table>{words}<div style="display:flex;height:18px;max-width:600px">{bar}</div>'
            "</div>"
        )


def breakdown(n: int, d_model: int, *, count: str = "madds") -> CostBreakdown:
    """Per-term cost of one multi-head attention layer over N tokens (h·d_k = d_model)."""
    n, d, f = positive_int("n", n), positive_int("d_model", d_model), _factor(count)
    return CostBreakdown(
        n=n,
        d_model=d,
        count=count,
        projections=f * 3 * n * d * d,
        scores=f * n * n * d,
        weighted_sum=f * n * n * d,
        output_projection=f * n * d * d,
    )


def mha_flops(n: int, d_model: int, *, count: str = "madds") -> int:
    """4·N·d_model² + 2·N²·d_model multiply-adds (doubled with count="flops").

    >>> mha_flops(1024, 512)
    2147483648
    """
    return breakdown(n, d_model, count=count).total


def crossover_length(d_model: int) -> int:
    """The N past which the N² terms outweigh the linear ones: 2N²d > 4Nd² iff N > 2·d_model.

    >>> crossover_length(4096)
    8192
    """
    return 2 * positive_int("d_model", d_model)


def score_memory_bytes(
    n: int, m: int | None = None, *, heads: int = 1, batch: int = 1, dtype=np.float32
) -> int:
    """Bytes to hold the (batch, heads, N, M) score table at once, as the dense path does."""
    m = n if m is None else m
    cells = (
        positive_int("n", n)
        * positive_int("m", m)
        * positive_int("heads", heads)
        * positive_int("batch", batch)
    )
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:
        raise AttnlabError(f"expected a numpy dtype such as 'float32', but got {dtype!r}") from None
    return cells * itemsize
