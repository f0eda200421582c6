"""The blockwise backward pass's sums over query blocks, in one fixed order.

Shape legend: Bq query rows per block, Bk keys per tile; a lead index picks one (..., ) element.

Every query block adds its share into dK and dV of the key tiles it sees (and into each
head's sink gradient). Floating-point addition is not associative, so adds made in the order
the threads happen to reach them give results whose last bits change from call to call: under
a CPU hog, a 1023 x 1024 causal bfloat16 ``flash_attn_backward`` with a 1 MiB tile budget gave
two different dK. Here each (lead index, key tile) takes its blocks' adds in block order: a
block waits, at its first add to a tile, until every lower block that sees the tile has added
its share, and passes the turn on after its last strip of that tile.

No wait can deadlock: the work items start in block order (``in_block_order``), so the
lowest unfinished block always has its turn, and a block only ever waits for lower ones,
which are already running. A block that stops early (a row with no key, an error) passes the
turns it did not take (``finish``). The waits cost little: blocks sweep their tiles in the
same order, a lower block a step ahead.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict

__all__ = ["Turns", "in_block_order"]

_ALL = "all"  # the sink gradient's one "tile": one add per block and lead index


def in_block_order(items: list) -> list:
    """The work items (query block, lead indices), by the block's first row (stable)."""
    return sorted(items, key=lambda item: item[0][0])


class Turns:
    """Whose turn it is to add into each (lead index, key tile, kind) of the gradients.

    Args:
        plans: each query block's steps, ``{(r0, r1): [(a, b, (c0, c1), masked), ...]}``
            (``_tiles.plan``: a tile's strips are consecutive and stay inside its columns).
        bk: keys per tile.   kinds: what each block adds per tile ("v", "k"), and "sink".
    """

    def __init__(self, plans: dict, bk: int, kinds: tuple[str, ...]):
        self._cond = threading.Condition()
        self._at: dict = {}  # (idx, tile, kind) -> the position whose turn it is
        self._done: dict = {}  # (idx, block) -> {(tile, kind)} this block has passed on
        self._place: dict = {}  # (block, tile) -> its position among the blocks seeing the tile
        self._marks: dict = {}  # block -> per step: (tile, first strip?, last strip?)
        self.kinds = kinds
        seen: dict = defaultdict(int)
        for rank, block in enumerate(sorted(plans)):
            tiles = [c0 // bk for _a, _b, (c0, _c1), _m in plans[block]]
            self._marks[block] = [
                (t, i == 0 or tiles[i - 1] != t, i + 1 == len(tiles) or tiles[i + 1] != t)
                for i, t in enumerate(tiles)
            ]
            for t in dict.fromkeys(tiles):
                self._place[block, t] = seen[t]
                seen[t] += 1
            self._place[block, _ALL] = rank

    @contextlib.contextmanager
    def adding(self, idx, block, step: int | None, kind: str):
        """Around one add of ``block``'s step ``step`` (None: the sink gradient) for lead
        index ``idx``: waits for the turn at a tile's first strip, passes it at its last."""
        tile, first, last = (_ALL, True, True) if step is None else self._marks[block][step]
        if first:
            self._wait(idx, block, tile, kind)
        yield
        if last:
            self._pass(idx, block, tile, kind)

    def finish(self, idx, block) -> None:
        """Pass on every turn of ``block`` at ``idx`` it did not take (it stopped early)."""
        done = self._done.get((idx, block), set())
        tiles = dict.fromkeys(t for t, _first, _last in self._marks[block])
        for kind in self.kinds:
            for tile in (_ALL,) if kind == "sink" else tiles:
                if (tile, kind) not in done:
                    self._wait(idx, block, tile, kind)
                    self._pass(idx, block, tile, kind)
        self._done.pop((idx, block), None)

    def _wait(self, idx, block, tile, kind) -> None:
        key, mine = (idx, tile, kind), self._place[block, tile]
        with self._cond:
            self._cond.wait_for(lambda: self._at.get(key, 0) == mine)

    def _pass(self, idx, block, tile, kind) -> None:
        with self._cond:
            self._at[idx, tile, kind] = self._place[block, tile] + 1
            self._done.setdefault((idx, block), set()).add((tile, kind))
            self._cond.notify_all()
