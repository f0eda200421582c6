"""Public home of the position tables: ``attnlab.positions.sinusoidal(n, d_model)``."""

from attnlab.core.positions import sinusoidal

__all__ = ["sinusoidal"]
