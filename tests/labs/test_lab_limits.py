"""Each lab's limits are written once, in its spec, and the lab function enforces exactly those.

For every parameter with a bound, the public lab function is called just inside and just
outside each edge (edge ± 1 for a count, 0 and 1 themselves for a share in (0, 1)): outside
raises an AttnlabError naming the parameter; inside passes the checks (the run is stopped right
after the parameter is checked, so no test pays for a lab at its largest size). A bound written
again in a lab's body, and changed in one place only, fails here.
"""

from __future__ import annotations

import dataclasses

import pytest

from attnlab.errors import AttnlabError
from attnlab.labs import LABS
from attnlab.labs._spec import LabSpec


def _edges(p) -> list[tuple[object, bool]]:
    """(value, inside) pairs at this parameter's bounds."""
    if p.kind is float and p.open_bounds:
        return [(p.low, False), (p.high, False), (p.low + 1e-9, True), (p.high - 1e-9, True)]
    edges = []
    if p.low is not None:
        edges += [(int(p.low) - 1, False), (int(p.low), True)]
    if p.high is not None:
        edges += [(int(p.high) + 1, False), (int(p.high), True)]
    return [((v,) if p.many else v, inside) for v, inside in edges]


CASES = [
    pytest.param(spec.name, p.name, value, inside, id=f"{spec.name}-{p.name}={value}")
    for spec in LABS.values()
    for p in spec.params
    if p.kind in (int, float) and (p.low is not None or p.high is not None)
    for value, inside in _edges(p)
]


class _Checked(Exception):
    """Raised once the parameter under test has passed its spec's check: the run stops there."""


def test_every_lab_has_bounded_parameters():
    assert {name for name, *_ in (c.values for c in CASES)} == set(LABS)


@pytest.mark.parametrize(("lab", "name", "value", "inside"), CASES)
def test_each_limit_holds_at_its_edge(monkeypatch, lab, name, value, inside):
    run = LABS[lab].run  # the public function, al.labs.<name>
    if not inside:
        with pytest.raises(AttnlabError, match=name):
            run(**{name: value})
        return
    check = LabSpec.check

    def stop_once_checked(self, **values):
        checked = check(self, **values)
        if name in values:
            raise _Checked
        return checked

    monkeypatch.setattr(LabSpec, "check", stop_once_checked)
    with pytest.raises(_Checked):
        run(**{name: value})


BOUNDED = [
    pytest.param(spec.name, p.name, id=f"{spec.name}-{p.name}")
    for spec in LABS.values()
    for p in spec.params
    if p.kind is int and p.low is not None
]


@pytest.mark.parametrize(("lab", "name"), BOUNDED)
def test_a_bound_changed_in_the_spec_changes_the_lab(lab, name):
    # Raise the lower bound by 5 in the spec alone: the lab must refuse the old edge + 4.
    spec = LABS[lab]
    old = spec.params
    p = spec.param(name)
    tighter = dataclasses.replace(p, low=p.low + 5)
    value = int(p.low) + 4
    object.__setattr__(spec, "params", tuple(tighter if q is p else q for q in old))
    try:  # a frozen spec: swapped by hand, put back below
        with pytest.raises(AttnlabError, match=name):
            spec.run(**{name: (value,) if p.many else value})
    finally:
        object.__setattr__(spec, "params", old)
