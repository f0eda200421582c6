"""Argument checks shared by the core's public functions (validation once, at the boundary)."""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError


def positive_int(name: str, value, error: type[AttnlabError] = AttnlabError) -> int:
    """``value`` as an int if it is a whole number >= 1 (not a bool); else ``error``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise error(f"expected {name} to be a positive integer, but got {value!r} instead")
    return int(value)
