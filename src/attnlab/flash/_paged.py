"""Paged key/value caches: where logical row p of sequence b lives in a pool of pages.

Shape legend:
    pages (num_blocks, page, h_k, d)     block_table (B, max_blocks): sequence b's pages, in order

Row p of sequence b is ``pages[block_table[b, p // page], p % page]``: the pages of a sequence
may lie anywhere in the pool and in any order (FlashAttention's paged KV cache, as vLLM keeps it).
"""

from __future__ import annotations

import numpy as np

from attnlab.errors import AttnlabError, ShapeError

__all__ = ["check_table", "slots"]


def check_table(block_table, batch: int, num_blocks: int, page: int, lengths: np.ndarray):
    """block_table as (B, max_blocks) int64, each sequence's used pages inside the pool."""
    table = np.asarray(block_table)
    if table.ndim != 2 or table.dtype.kind not in "iu" or table.shape[0] != batch:
        raise ShapeError(
            f"expected block_table to be an integer array of shape ({batch}, max_num_blocks), "
            f"but got dtype {table.dtype} and shape {table.shape} instead"
        )
    table = table.astype(np.int64)
    capacity = table.shape[1] * page
    for b, length in enumerate(lengths.tolist()):
        if length > capacity:
            raise AttnlabError(
                f"expected sequence {b}'s {length} keys to fit its block_table row "
                f"({table.shape[1]} pages of {page} = {capacity} rows), but they do not"
            )
        used = table[b, : -(-length // page)]  # the pages holding rows 0 .. length - 1
        if used.size and (used.min() < 0 or used.max() >= num_blocks):
            raise AttnlabError(
                f"expected block_table[{b}] to index pages 0..{num_blocks - 1} of the cache, "
                f"but got {used.tolist()} instead"
            )
    return table


def slots(table_row: np.ndarray, page: int, start: int, stop: int):
    """(page index, row in page) of logical rows start .. stop - 1 of one sequence."""
    rows = np.arange(start, stop)  # (stop - start,)
    return table_row[rows // page], rows % page
