"""The 2-pass shuffle run in memory with the plan's own functions.

It is what the dask graph must produce: the tests compare real stores with it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from daskshuffle._plan import Plan, block_order, group_order, group_piles, make_plan


def simulate(
    block_lengths: list[int], n_piles: int, seed: int, *, materialize: bool, group_nbytes: int = 1 << 62
) -> tuple[Plan, NDArray[np.int64]]:
    """The plan and the output order (source row numbers) of a shuffle."""
    plan = make_plan(block_lengths, n_piles, seed)
    starts = np.concatenate([[0], np.cumsum(block_lengths)])
    pieces = [np.arange(starts[b], starts[b + 1])[block_order(plan.counts[b], seed, b)] for b in range(plan.n_blocks)]
    out = []
    for start, stop in group_piles(plan.pile_sizes, 1, group_nbytes):
        reads = [pieces[b][plan.piece_offsets[b, start] : plan.piece_offsets[b, stop]] for b in range(plan.n_blocks)]
        rows = np.concatenate(reads) if reads else np.zeros(0, dtype=np.int64)
        out.append(rows[group_order(plan.counts[:, start:stop], seed, start, materialize=materialize)])
    order = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return plan, order.astype(np.int64)
