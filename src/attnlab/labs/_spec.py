"""A lab declared once: ``LabSpec`` and its ``Param`` entries, from which the rest is generated.

Each lab module ends with one ``SPEC``: the lab function, its parameters (default, bounds and
help), its table's columns with titles, one plot builder and an estimate of time and memory.
From the specs, ``attnlab.cli.labs`` builds one Typer command per lab (options with the CLI
bounds) and ``attnlab.web.labs`` one request model and route per lab (the web bounds, which may
be tighter so that a request stays within a few seconds; a training lab's, marked ``training``,
are sized to a training run's budget instead, so the page runs it at the CLI's defaults).
Nothing else repeats a default.

A parameter's default is read from the lab function's own signature, so the library, the CLI
and the web app cannot disagree about it; the web may name a smaller ``web_default`` where the
library's default is too slow for a request (the cost lab's N = 4096).

    Param      one argument: kind, bounds (CLI and web), help, list-valued or not, choices
    Estimate   seconds and bytes a run is expected to take (calibrated per lab, see its module)
    LabPlot    the lab's plot as data (x, named y series, axis titles); ``Series`` one line of it
    RowPlot    a line plot over a result's rows as data: its title, axes and ``Line`` entries
    LabSpec    the lab: name, title, function, parameters, columns, plot, estimate
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attnlab.labs._common import LabResult, check_int, check_ints, check_open_unit, jsonable

__all__ = ["SEED", "Estimate", "LabPlot", "LabSpec", "Line", "Param", "RowPlot", "Series"]


class _Unset:
    def __repr__(self) -> str:
        return "<from the signature>"


_UNSET: Any = _Unset()  # "take it from the lab function's signature"


@dataclass(frozen=True)
class Param:
    """One parameter of a lab, as the library, the CLI and the web app all see it.

    Bounds hold for each entry of a list-valued parameter. ``low``/``high`` are the CLI's
    (the lab function enforces them too); ``web_low``/``web_high`` are the web app's, None
    meaning the CLI's. With ``open_bounds`` both bounds are exclusive (a threshold in (0, 1)).
    """

    name: str
    help: str
    low: float | None = None
    high: float | None = None
    web_low: float | None = None
    web_high: float | None = None
    open_bounds: bool = False
    choices: tuple | None = None
    flag: str | None = None  # the CLI option, default "--" + name with dashes
    web: bool = True  # False: a CLI-only option (threads, say)
    web_default: Any = _UNSET
    web_items: int = 8  # most entries of a list on the web
    max_length: int | None = None  # most characters of a string on the web
    kind: type | None = None  # int, float or str; None: the default's type
    budget: bool = False  # the one parameter a web request over its budget is blamed on
    many: bool = False  # list-valued; set from a tuple default
    default: Any = _UNSET  # filled from the lab function's signature

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def bounds(self, *, web: bool = False) -> tuple[float | None, float | None]:
        if not web:
            return self.low, self.high
        low = self.low if self.web_low is None else self.web_low
        high = self.high if self.web_high is None else self.web_high
        return low, high

    def default_for(self, *, web: bool = False) -> Any:
        value = self.web_default if web and self.web_default is not _UNSET else self.default
        return list(value) if isinstance(value, tuple) else value

    def check(self, value):
        """``value`` within the library's bounds (``low``/``high``, the CLI's too), or an
        AttnlabError naming this parameter. The lab functions call it, through their spec, so a
        bound is written once. None passes where None is the default (no workers given)."""
        if value is None and self.default is None:
            return None
        if self.kind is float and self.open_bounds and (self.low, self.high) == (0.0, 1.0):
            return check_open_unit(self.name, value)
        if self.kind is not int or self.low is None:
            return value
        high = None if self.high is None else int(self.high)
        if self.many:
            return check_ints(self.name, value, low=int(self.low), high=high)
        return check_int(self.name, value, low=int(self.low), high=high)

    def _resolved(self, signature: inspect.Signature) -> Param:
        if self.name not in signature.parameters:
            raise TypeError(f"expected a parameter {self.name!r} of the lab function")
        default = signature.parameters[self.name].default
        many = isinstance(default, tuple)
        kind = self.kind or type(default[0] if many else default)
        return dataclasses.replace(self, default=default, many=many, kind=kind)


@dataclass(frozen=True)
class Estimate:
    """What a run is expected to cost: wall seconds and peak bytes (rough, within ~3x)."""

    seconds: float
    bytes: int

    def __str__(self) -> str:
        size = self.bytes / 2**20
        if size < 1:
            return f"{_duration(self.seconds)} and {self.bytes / 1024:,.0f} KiB"
        unit = f"{size:,.0f} MiB" if size < 10_240 else f"{size / 1024:,.0f} GiB"
        return f"{_duration(self.seconds)} and {unit}"


def machine_bytes() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.2g} s"
    if seconds < 5400:
        return f"{seconds / 60:,.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 86400:,.0f} days"


@dataclass(frozen=True)
class Series:
    name: str
    y: list[float | None]
    error: list[float | None] | None = None  # ± one standard error, when the lab reports it
    dash: bool = False  # a reference (model or theory), drawn dashed


@dataclass(frozen=True)
class LabPlot:
    """A lab's plot as data; the explorer and ``--plot FILE.html`` draw the same thing."""

    title: str
    kind: str  # "line" | "bar"
    x: list
    x_label: str
    y_label: str
    series: list[Series]
    log_x: bool = False
    log_y: bool = False
    words: list[str] = field(default_factory=list)  # the lab's own summary sentences

    def as_dict(self) -> dict:
        return jsonable(self)


@dataclass(frozen=True)
class Line:
    """One line of a plot over a result's rows, declared as data: each row's ``field`` (or one
    constant for every row: a theory's value), ``error`` the field of its standard error.
    ``name`` may name the result's own fields, ``"{heads} heads"``."""

    name: str
    field: str | float
    error: str | None = None
    dash: bool = False  # a reference (model or theory), drawn dashed

    def series(self, result) -> Series:
        rows = result.rows
        if isinstance(self.field, str):
            y = [getattr(row, self.field) for row in rows]
        else:
            y = [self.field] * len(rows)
        error = None if self.error is None else [getattr(row, self.error) for row in rows]
        return Series(self.name.format_map(_Fields(result)), y, error, dash=self.dash)


class _Fields(dict):
    def __init__(self, result):
        super().__init__()
        self.result = result

    def __missing__(self, name: str):
        return getattr(self.result, name)


@dataclass(frozen=True)
class RowPlot:
    """A line plot over a result's rows, declared as data; calling it on a result draws it.

    x is each row's ``x[0]`` (axis title ``x[1]``); one series per entry of ``lines``. The
    ``title`` may name the result's fields, ``"{trials:,} trials"``.
    """

    title: str
    y_label: str
    lines: tuple[Line, ...]
    x: tuple[str, str] = ("width", "d_k")
    log_x: bool = False
    log_y: bool = False

    def __call__(self, result) -> LabPlot:
        return LabPlot(title=self.title.format_map(_Fields(result)), kind="line",
                       x=[getattr(row, self.x[0]) for row in result.rows], x_label=self.x[1],
                       y_label=self.y_label, series=[line.series(result) for line in self.lines],
                       log_x=self.log_x, log_y=self.log_y)  # fmt: skip


@dataclass(frozen=True)
class LabSpec:
    """Everything about one lab that a front end needs; calling it runs the lab.

    Args:
        heading: the table's title, formatted with the run's parameters.
        columns: (key, title) per column of ``result.table()``, in order.
        plot: result -> LabPlot, read from the result (nothing recomputed).
        estimate: the parameters (all of them, by name) -> Estimate.

    The parameter a web request over its budget is blamed on is the one marked ``budget=True``
    (``budget_field``): exactly one per lab.
    """

    name: str
    title: str
    summary: str
    heading: str
    run: Callable[..., LabResult]
    params: tuple[Param, ...]
    columns: tuple[tuple[str, str], ...]
    plot: Callable[[Any], LabPlot]
    estimate: Callable[..., Estimate]
    progress: bool = True  # the lab takes progress=...
    # A training lab: the web runs it at the CLI's defaults through the runs queue, within the
    # budget of a training run rather than of a request (attnlab.web.runs).
    training: bool = False

    def __post_init__(self):
        signature = inspect.signature(self.run)
        object.__setattr__(self, "params", tuple(p._resolved(signature) for p in self.params))
        if sum(p.budget for p in self.params) != 1:
            raise TypeError(f"expected one parameter of lab {self.name!r} marked budget=True")

    @property
    def budget_field(self) -> str:
        """The parameter a web request over its budget is blamed on."""
        return next(p.name for p in self.params if p.budget)

    def __call__(self, *args, **kwargs) -> LabResult:
        return self.run(*args, **kwargs)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def check(self, **values) -> tuple:
        """Each value checked against its parameter's bounds, in the order given:
        ``d_k, seed = SPEC.check(d_k=d_k, seed=seed)``."""
        return tuple(self.param(name).check(value) for name, value in values.items())

    def defaults(self, *, web: bool = False) -> dict:
        """Every parameter's default (lists as lists); with ``web``, only the web's."""
        return {p.name: p.default_for(web=web) for p in self.params if p.web or not web}

    def cost(self, **params) -> Estimate:
        """The estimate for ``params``, the others at their defaults."""
        return self.estimate(**{**self.defaults(), **params})

    def titles(self, columns: list[str]) -> list[str]:
        named = dict(self.columns)
        return [named.get(c, c) for c in columns]

    def figure(self, result) -> LabPlot:
        """The plot of ``result``, with the lab's summary sentences as its words."""
        return dataclasses.replace(self.plot(result), words=list(result.summary()))

    def describe(self) -> dict:
        """Name, title, summary, whether it trains, and each web parameter's type, default and
        bounds (JSON)."""
        params = []
        for p in self.params:
            if not p.web:
                continue
            low, high = p.bounds(web=True)
            kind = {int: "integer", float: "number", str: "string"}[p.kind]
            params.append({"name": p.name, "type": "list" if p.many else kind,
                           "enum": list(p.choices) if p.choices else None,
                           "default": p.default_for(web=True), "min": low, "max": high,
                           "description": p.help})  # fmt: skip
        return {"name": self.name, "title": self.title, "doc": self.summary,
                "training": self.training, "params": params}  # fmt: skip


#: Every lab's seed: numpy takes any non-negative integer; the web keeps to 32 bits.
SEED = Param("seed", "Same seed, same numbers.", low=0, web_high=2**32 - 1)
