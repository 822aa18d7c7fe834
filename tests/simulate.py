"""The 2-pass shuffle run in memory with the plan's own functions.

It is what the dask graph must produce: the tests compare real stores with it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from daskshuffle.epochs._unit_plan import deal_groups, group_permutation, unit_bounds
from daskshuffle.plan._level_plan import LevelPlan, block_table, make_level_plan, piece_offsets, span_reads
from daskshuffle.plan._plan import Plan, block_order, group_order, make_plan, merge_runs


def simulate(
    block_lengths: list[int], n_piles: int, seed: int, *, group_nbytes: int = 1 << 62
) -> tuple[Plan, NDArray[np.int64]]:
    """The plan and the output order (source row numbers) of a shuffle."""
    plan = make_plan(block_lengths, n_piles, seed)
    starts = np.concatenate([[0], np.cumsum(block_lengths)])
    pieces = [np.arange(starts[b], starts[b + 1])[block_order(plan.counts[b], seed, b)] for b in range(plan.n_blocks)]
    out = []
    for start, stop in merge_runs(plan.pile_sizes, 1, group_nbytes):
        reads = [pieces[b][plan.piece_offsets[b, start] : plan.piece_offsets[b, stop]] for b in range(plan.n_blocks)]
        rows = np.concatenate(reads) if reads else np.zeros(0, dtype=np.int64)
        out.append(rows[group_order(plan.counts[:, start:stop], seed, start)])
    order = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return plan, order.astype(np.int64)


def simulate_levels(
    block_lengths: list[int],
    n_piles: int,
    fanouts: list[int],
    seed: int,
    *,
    block_rows: int,
    group_nbytes: int = 1 << 62,
) -> tuple[LevelPlan, NDArray[np.int64]]:
    """The plan and the output order of a shuffle of ``len(fanouts) + 1`` levels, from the plan's own functions."""
    plan = make_level_plan(block_lengths, n_piles, fanouts, seed, block_rows)
    starts = np.concatenate([[0], np.cumsum(block_lengths)]).astype(np.int64)
    blocks = [np.arange(starts[b], starts[b + 1]) for b in range(plan.n_blocks)]
    for index, level in enumerate(plan.levels):
        tables = [block_table(*level.group_draw(g)) for g in range(level.n_groups)]
        groups, rows_in_group = level.block_groups
        pieces = [
            rows[block_order(tables[g][i], level.seed, block)]
            for block, (rows, g, i) in enumerate(zip(blocks, groups, rows_in_group, strict=True))
        ]
        blocks = []
        for span, (g, child) in enumerate(zip(*level.spans, strict=True)):
            reads = span_reads(tables[g], int(level.group_bounds[g]), int(child))
            blocks.append(np.concatenate([pieces[b][a:z] for b, a, z in reads] or [np.zeros(0, np.int64)]))
            assert len(blocks[-1]) == level.span_lengths[span], f"level {index + 1}'s span {span}"
    last = []
    for block, rows in enumerate(blocks):
        counts, lo = plan.last_counts(block)
        last.append((rows[block_order(counts, plan.last_seed, block)], piece_offsets(counts, lo, n_piles)))
    out = []
    for start, stop in merge_runs(plan.pile_sizes, 1, group_nbytes):
        first, counts, _ = plan.merge_columns(start, stop)
        reads = [rows[offsets[start] : offsets[stop]] for rows, offsets in last[first : first + len(counts)]]
        rows = np.concatenate(reads) if reads else np.zeros(0, dtype=np.int64)
        out.append(rows[group_order(counts, plan.seed, start)])
    order = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return plan, order.astype(np.int64)


def unit_groups(bounds: NDArray[np.int64], group_rows: int, seed: int, epoch: int) -> tuple[Any, list[Any]]:
    """The groups of one store's units at ``bounds`` in ``epoch``, as the loader deals them (each unit once)."""
    sizes = np.diff(np.asarray(bounds, dtype=np.int64)).astype(np.int64)
    return deal_groups(sizes, group_rows, seed, epoch)


def unit_stream(n_rows: int, unit_rows: int, group_rows: int, seed: int, epoch: int) -> NDArray[np.int64]:
    """The store rows of an epoch of a loader of units (a store whose piles are stored shuffled), in order.

    The units dealt into groups, each group read in turn and handed out in
    a permutation of its own, from the plan's own functions.
    """
    bounds = unit_bounds(n_rows, unit_rows)
    _, groups = unit_groups(bounds, group_rows, seed, epoch)
    out = [np.zeros(0, dtype=np.int64)]
    for index, units in enumerate(groups):
        rows = np.concatenate([np.arange(bounds[u], bounds[u + 1]) for u in units.tolist()])
        out.append(rows[group_permutation(len(rows), seed, epoch, index)])
    return np.concatenate(out).astype(np.int64)
