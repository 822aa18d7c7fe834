"""The 2-pass shuffle run in memory with the plan's own functions.

It is what the dask graph must produce: the tests compare real stores with it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from daskshuffle._levels import TwoLevelPlan, make_two_level_plan, piece_offsets, span_reads
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


def simulate_two_levels(
    block_lengths: list[int],
    n_piles: int,
    n_super: int,
    seed: int,
    *,
    block_rows: int,
    materialize: bool = False,
    group_nbytes: int = 1 << 62,
) -> tuple[TwoLevelPlan, NDArray[np.int64]]:
    """The plan and the output order of a two-level shuffle, from the plan's own functions."""
    plan = make_two_level_plan(block_lengths, n_piles, n_super, seed, block_rows)
    starts = np.concatenate([[0], np.cumsum(block_lengths)]).astype(np.int64)
    tables = [plan.block_table(g) for g in range(plan.n_groups)]
    pieces1 = []
    for block in range(plan.n_blocks):
        group, index = plan.group_of(block)
        order = block_order(tables[group][index], plan.first_seed, block)
        pieces1.append(np.arange(starts[block], starts[block + 1])[order])
    pieces2 = []
    for span in range(plan.n_spans):
        s, group = divmod(span, plan.n_groups)
        reads = span_reads(tables[group], int(plan.group_bounds[group]), s)
        rows = np.concatenate([pieces1[b][a:z] for b, a, z in reads] or [np.zeros(0, np.int64)])
        assert len(rows) == plan.span_lengths[span]
        counts, lo = plan.span_counts_of(span)
        pieces2.append((rows[block_order(counts, plan.second_seed, span)], piece_offsets(counts, lo, n_piles)))
    out = []
    for start, stop in group_piles(plan.pile_sizes, 1, group_nbytes):
        first, counts, _ = plan.merge_columns(start, stop)
        reads = [rows[offsets[start] : offsets[stop]] for rows, offsets in pieces2[first : first + len(counts)]]
        rows = np.concatenate(reads) if reads else np.zeros(0, dtype=np.int64)
        out.append(rows[group_order(counts, plan.seed, start, materialize=materialize)])
    order = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return plan, order.astype(np.int64)
