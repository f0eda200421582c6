"""Public home of the cost model: ``attnlab.cost.mha_flops(n, d_model)`` and friends."""

from attnlab.core.cost_model import (
    CostBreakdown,
    breakdown,
    crossover_length,
    mha_flops,
    score_memory_bytes,
)

__all__ = ["CostBreakdown", "breakdown", "crossover_length", "mha_flops", "score_memory_bytes"]
