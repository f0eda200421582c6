"""What every lab shares: seeded streams, validation, JSON-ready results, JSON and CSV text.

Randomness: every lab draws from ``numpy.random.default_rng([seed, lab, *key])``. Keying the
stream by the lab and the row (a width, a chunk index) makes each row reproducible on its own:
the d_k = 64 row of a lab is the same whether or not other widths were asked for, and a chunked
draw gives the same numbers whatever the number of worker threads (see ``_scores``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Callable, Sequence

import numpy as np

from attnlab.errors import AttnlabError

__all__ = [
    "Claim",
    "LabResult",
    "Progress",
    "column_keys",
    "jsonable",
    "rng_at",
    "rng_for",
    "row_table",
]

#: progress(done, total): called as a lab advances, so a front end can draw a progress bar.
Progress = Callable[[int, int], None]

# Stream tags: one per lab, so two labs never share draws at the same seed.
VARIANCE, SATURATION, HISTOGRAM, PERMUTATION, COST, PROOF, GRADIENT = range(1, 8)

# Entries per chunk of a lab's own draws (4 MiB of float64), so memory stays bounded.
CHUNK_ELEMENTS = 1 << 19
MAX_WIDTH = 1 << 16  # a sanity bound on d_k


def rng_for(seed: int, *key: int) -> np.random.Generator:
    """numpy's default generator, seeded by the lab's seed and the row's key."""
    return np.random.default_rng([seed, *key])


def rng_at(state: dict) -> np.random.Generator:
    """A generator that goes on from ``state``, a ``bit_generator.state`` dict: a stream handed
    from one chunk to the next as plain data (``_chunks.chained``). ``state`` is not changed."""
    bits = getattr(np.random, state["bit_generator"])()
    bits.state = state
    return np.random.Generator(bits)


# -- validation: once, at the public boundary, worded "expected ..., but got ... instead" -------


def check_int(name: str, value, *, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise AttnlabError(f"expected {name} to be an integer, but got {value!r} instead")
    if value < low or (high is not None and value > high):
        bound = f"at least {low}" if high is None else f"from {low} to {high}"
        raise AttnlabError(f"expected {name} {bound}, but got {value!r} instead")
    return int(value)


def check_ints(name: str, values, *, low: int = 1, high: int | None = None) -> tuple[int, ...]:
    if isinstance(values, int | np.integer) or not isinstance(values, Sequence | np.ndarray):
        raise AttnlabError(f"expected {name} to be a sequence of integers, but got {values!r}")
    if len(values) == 0:
        raise AttnlabError(f"expected at least one entry in {name}, but got {values!r} instead")
    return tuple(check_int(f"every entry of {name}", v, low=low, high=high) for v in values)


def check_seed(seed) -> int:
    # numpy's SeedSequence takes non-negative integers only.
    return check_int("seed", seed, low=0)


def check_open_unit(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise AttnlabError(f"expected {name} to be a number, but got {value!r} instead")
    if not 0.0 < float(value) < 1.0:
        raise AttnlabError(f"expected {name} strictly between 0 and 1, but got {value!r} instead")
    return float(value)


def check_positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise AttnlabError(f"expected {name} to be a number, but got {value!r} instead")
    if not (math.isfinite(value) and value > 0):
        raise AttnlabError(f"expected {name} to be a positive number, but got {value!r} instead")
    return float(value)


# -- results ------------------------------------------------------------------------------------


def jsonable(value):
    """Plain JSON types only: dataclasses -> dict, tuples -> list, numpy -> Python, NaN -> None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [jsonable(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"expected a JSON-ready value, but got {type(value).__name__} instead")


@dataclasses.dataclass(frozen=True)
class Claim:
    """What a lab sets out to show, and whether this run showed it.

    ``claim`` is the chapter's sentence the lab tests; ``held`` is the run's verdict on it and
    ``why`` the numbers behind that verdict, so a run too short to show the claim says so
    instead of reading as a plain "done".
    """

    claim: str
    held: bool
    why: str


class LabResult:
    """Mixin for a lab's frozen dataclass: ``as_dict()`` for JSON, ``table()`` for tables.

    A result may keep its run's parameters in one field, ``settings`` (name -> value, in the
    order its JSON lists them), instead of a field per parameter that restates the lab's
    signature: each then reads as an attribute (``r.trials``) and stands in ``as_dict()`` and
    ``repr`` as a field of its own. Such a dataclass is declared with ``repr=False``.
    """

    lab: str = ""

    def __getattr__(self, name: str):
        settings = self.__dict__.get("settings")  # only reached when nothing else has ``name``
        if settings is not None and name in settings:
            return settings[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _items(self) -> list[tuple[str, object]]:
        """(name, value) of every field, the settings spread out first."""
        items = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]
        spread = dict(self.__dict__.get("settings") or {})
        return [*spread.items(), *((k, v) for k, v in items if k != "settings" or not spread)]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self._items())
        return f"{type(self).__name__}({fields})"

    def as_dict(self) -> dict:
        """Every field, JSON-ready (dict/list/str/int/float/bool/None; NaN becomes None)."""
        return {"lab": self.lab, **{name: jsonable(value) for name, value in self._items()}}

    def table(self) -> tuple[list[str], list[list]]:
        """(columns, rows): the lab's headline numbers, one row per width or case."""
        raise NotImplementedError

    def summary(self) -> list[str]:
        """A few plain sentences stating what the numbers show."""
        return []

    def claim(self) -> Claim | None:
        """The chapter's claim this run tests and its verdict; None for a lab that measures
        without a pass/fail claim (the training labs have one)."""
        return None

    def to_json(self) -> str:
        """``as_dict()`` as JSON text: the one serialiser the CLI and the web app share."""
        return json.dumps(self.as_dict(), indent=2, allow_nan=False)

    def to_csv(self) -> str:
        """``table()`` as CSV text, keys as the header; None and NaN become empty cells."""
        columns, rows = self.table()
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([["" if x is None else x for x in jsonable(row)] for row in rows])
        return out.getvalue()

    def _repr_html_(self) -> str:
        """Jupyter's display: the table, the summary and the plot, offline (see ``_display``)."""
        from attnlab.labs._display import result_html

        return result_html(self)

    def _ipython_display_(self) -> None:
        """Jupyter's display, preferred to the HTML above: the table, then the plot as Plotly's
        notebook mimetype, so a saved notebook holds no plotly.js (see ``_display``)."""
        from attnlab.labs._display import show

        show(self)


def column_keys(columns: tuple[tuple[str, str], ...]) -> list[str]:
    """The keys of a lab's (key, title) columns, in order: its table's header."""
    return [key for key, _title in columns]


def row_table(rows, columns: tuple[tuple[str, str], ...]) -> tuple[list[str], list[list]]:
    """``table()`` for rows that carry every column as an attribute of the column's key."""
    keys = column_keys(columns)
    return keys, [[getattr(row, key) for key in keys] for row in rows]
