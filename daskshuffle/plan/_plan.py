"""The plan: where every row goes, computed before any byte is read.

Pure numpy. ``counts[i, j]``, the rows of block ``i`` that go to pile ``j``, is
``Multinomial(len_i, 1/M)`` keyed ``(seed, "counts", i)``; which rows those are is a uniform
assignment keyed ``(seed, "rows", i)``, kept in source order inside a piece; a pile is its pieces in
block order. Together: every row goes to a uniformly random pile, independently (pass 1).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._parse import Settings
from .._random import make_rng

__all__ = [
    "Plan",
    "PlanBase",
    "auto_n_piles",
    "block_counts",
    "block_order",
    "block_rows",
    "group_order",
    "make_plan",
    "merge_runs",
    "plan_nbytes",
]

IntArray = NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class PlanBase:
    """What a plan of any number of levels has: its blocks, piles and seed, and the piles' sizes and offsets.

    Attributes
    ----------
    block_lengths : (n_blocks,) int64
        Rows in each block of the source, in source order.
    n_piles : int
        Piles of the output, ``M``.
    seed : int
        The shuffle's seed, which every draw is keyed by.
    """

    block_lengths: IntArray
    n_piles: int
    seed: int

    @property
    def n_blocks(self) -> int:
        return len(self.block_lengths)

    @cached_property
    def n_rows(self) -> int:
        return int(self.block_lengths.sum())

    @cached_property
    def pile_sizes(self) -> IntArray:
        """Rows in each pile, ``(n_piles,)``."""
        raise NotImplementedError

    @cached_property
    def pile_offsets(self) -> IntArray:
        """Pile ``j`` is rows ``pile_offsets[j]:pile_offsets[j + 1]`` of the output."""
        return _prepend_zero(np.cumsum(self.pile_sizes))


@dataclass(frozen=True, eq=False)
class Plan(PlanBase):
    """The layout of a one-level shuffle: how many rows of each block go to each pile (and :class:`PlanBase`'s).

    Attributes
    ----------
    counts : (n_blocks, n_piles) int64
        ``counts[i, j]`` rows of block ``i`` go to pile ``j``.
    """

    counts: IntArray

    @cached_property
    def pile_sizes(self) -> IntArray:
        sizes: IntArray = self.counts.sum(axis=0)
        return sizes

    @cached_property
    def piece_offsets(self) -> IntArray:
        """``(n_blocks, n_piles + 1)``: piece ``(i, j)`` is rows
        ``piece_offsets[i, j]:piece_offsets[i, j + 1]`` of block ``i``'s pieces."""
        offsets = np.zeros((self.n_blocks, self.n_piles + 1), dtype=np.int64)
        np.cumsum(self.counts, axis=1, out=offsets[:, 1:])
        return offsets

    def merge_columns(self, start: int, stop: int) -> tuple[int, IntArray, IntArray]:
        """What a merge of piles ``[start, stop)`` reads: ``(first_block, counts, read_starts)``.

        Block ``first_block + i`` gives ``counts[i]`` rows, read from row ``read_starts[i]`` of its pieces.

        Examples
        --------
        >>> first, counts, starts = make_plan([5, 3], n_piles=2, seed=0).merge_columns(1, 2)
        >>> first, counts.shape, bool((starts == make_plan([5, 3], 2, 0).counts[:, 0]).all())
        (0, (2, 1), True)
        """
        return 0, self.counts[:, start:stop], self.piece_offsets[:, start]


def _prepend_zero(values: IntArray) -> IntArray:
    return np.concatenate([np.zeros(1, dtype=np.int64), values.astype(np.int64, copy=False)])


def make_plan(block_lengths: Sequence[int] | NDArray[np.integer], n_piles: int, seed: int) -> Plan:
    """Draw how many rows of each block go to each pile.

    Examples
    --------
    >>> plan = make_plan([5, 3], n_piles=2, seed=0)
    >>> plan.counts.sum(axis=1).tolist()
    [5, 3]
    >>> int(plan.pile_offsets[-1])
    8
    """
    lengths = np.asarray(block_lengths, dtype=np.int64).reshape(-1)
    counts = np.zeros((len(lengths), n_piles), dtype=np.int64)
    for block, length in enumerate(lengths.tolist()):
        counts[block] = block_counts(length, n_piles, seed, block)
    return Plan(block_lengths=lengths, n_piles=int(n_piles), seed=int(seed), counts=counts)


def block_counts(length: int, n_piles: int, seed: int, block: int) -> IntArray:
    """Row ``block`` of :attr:`Plan.counts`, drawn alone: what a scatter task computes for itself.

    Examples
    --------
    >>> plan = make_plan([5, 3], n_piles=2, seed=0)
    >>> block_counts(3, 2, 0, 1).tolist() == plan.counts[1].tolist()
    True
    """
    if not length:
        return np.zeros(n_piles, dtype=np.int64)
    counts: IntArray = make_rng(seed, "counts", block).multinomial(int(length), np.full(n_piles, 1.0 / n_piles))
    return counts.astype(np.int64, copy=False)


def block_order(counts: IntArray, seed: int, block: int) -> NDArray[np.intp]:
    """Rows of ``block`` in piece order: all of pile 0's rows, then pile 1's, ...

    ``counts`` is the block's row of :attr:`Plan.counts`; inside a piece rows keep their source
    order. ``rows[block_order(...)]`` is what pass 1 writes for the block.

    Examples
    --------
    >>> plan = make_plan([6], n_piles=2, seed=0)
    >>> order = block_order(plan.counts[0], plan.seed, 0)
    >>> sorted(order.tolist())
    [0, 1, 2, 3, 4, 5]
    """
    n_piles = len(counts)
    piles = np.repeat(np.arange(n_piles, dtype=np.min_scalar_type(n_piles)), counts)
    assignment = make_rng(seed, "rows", block).permutation(piles)
    # A stable sort of small unsigned integers is a radix sort: linear time.
    return np.argsort(assignment, kind="stable")


def merge_runs(pile_sizes: IntArray, row_nbytes: int, target_nbytes: int) -> list[tuple[int, int]]:
    """Cut piles into runs ``[start, stop)`` of about ``target_nbytes`` each.

    Each run holds whole piles, one at least; empty piles join their neighbours.

    Examples
    --------
    >>> merge_runs(np.array([2, 2, 2, 5, 1]), row_nbytes=1, target_nbytes=4)
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    """
    ends = np.cumsum(np.asarray(pile_sizes, dtype=np.int64) * row_nbytes)
    groups: list[tuple[int, int]] = []
    start, n_piles = 0, len(ends)
    while start < n_piles:  # a search per group, not a step per pile: 10^5 piles cut in milliseconds
        base = int(ends[start - 1]) if start else 0
        first_full = int(np.searchsorted(ends, base, side="right"))  # leading empty piles ride along
        stop = max(int(np.searchsorted(ends, base + target_nbytes, side="right")), min(first_full, n_piles - 1) + 1)
        groups.append((start, stop))
        start = stop
    return groups


def split_piles(pile_sizes: IntArray, n_parts: int) -> list[tuple[int, int]]:
    """Cut piles into exactly ``n_parts`` runs ``[start, stop)`` of whole piles, of near-equal rows.

    Each run holds at least one pile; each cut is the pile boundary nearest an equal share of the rows.
    ``n_parts`` is at most the piles (the Parquet store's ``merge_runs`` refuses more, with the user's words).

    Examples
    --------
    >>> split_piles(np.array([3, 1, 4, 1, 5, 9, 2, 6]), 3)
    [(0, 4), (4, 6), (6, 8)]
    """
    n_piles = len(pile_sizes)
    offsets = _prepend_zero(np.cumsum(pile_sizes, dtype=np.int64))
    targets = np.arange(1, n_parts) * (offsets[-1] / n_parts)
    # The boundary nearest each target, then kept strictly increasing with room for the runs after it.
    right = np.clip(np.searchsorted(offsets, targets), 1, n_piles)
    nearer_left = (targets - offsets[right - 1]) <= (offsets[right] - targets)
    cuts = np.where(nearer_left, right - 1, right).tolist()
    bounds = [0]
    for index, cut in enumerate(cuts, start=1):
        bounds.append(min(max(cut, bounds[-1] + 1), n_piles - (n_parts - index)))
    bounds.append(n_piles)
    return list(itertools.pairwise(bounds))


def group_order(counts: IntArray, seed: int, start: int) -> NDArray[np.intp]:
    """Order the pieces of piles ``start, start + 1, ...`` read from every block into piles.

    ``counts`` is ``plan.counts[:, start:stop]``; the input rows are each block's pieces for those
    piles, block after block. ``parts[group_order(...)]`` is the piles laid end to end, each pile's
    rows shuffled (keyed ``(seed, "materialize", pile)``) so that any run of a pile is a uniform sample.

    Examples
    --------
    >>> counts = np.array([[1, 2], [1, 0]])  # block 0 gave 1 row to pile 0 and 2 to pile 1
    >>> group_order(counts, seed=0, start=0).tolist()  # pile 0 is reads 0 and 3, pile 1 reads 1 and 2, shuffled
    [0, 3, 2, 1]
    """
    n = int(counts.sum())
    # Where each piece starts in the output: the pile's start in the group plus
    # the rows of the same pile in earlier blocks.
    pile_starts = _prepend_zero(np.cumsum(counts.sum(axis=0)))[:-1]
    earlier = np.cumsum(counts, axis=0) - counts
    piece_starts = (pile_starts[None, :] + earlier).reshape(-1)
    flat_counts = counts.reshape(-1)
    # destination[k] is where row k of the concatenated reads belongs.
    read_starts = _prepend_zero(np.cumsum(flat_counts))[:-1]
    destination = np.repeat(piece_starts - read_starts, flat_counts) + np.arange(n, dtype=np.int64)
    order = np.empty(n, dtype=np.intp)
    order[destination] = np.arange(n, dtype=np.intp)
    sizes = counts.sum(axis=0)
    for pile, (offset, size) in enumerate(zip(pile_starts.tolist(), sizes.tolist(), strict=True), start=start):
        if size > 1:
            segment = order[offset : offset + size]
            order[offset : offset + size] = segment[make_rng(seed, "materialize", pile).permutation(size)]
    return order


def block_rows(row_nbytes: int, block_nbytes: int, chunk_rows: int = 1) -> int:
    """Rows of a block: the most whole chunks of ``chunk_rows`` that fit ``block_nbytes``, one at least.

    Examples
    --------
    >>> block_rows(row_nbytes=100, block_nbytes=1_000, chunk_rows=3)
    9
    """
    return max(1, block_nbytes // max(row_nbytes * chunk_rows, 1)) * chunk_rows


def plan_nbytes(n_blocks: int, n_piles: int) -> int:
    """Bytes a :class:`Plan` holds on the client once the merge has asked for its offsets.

    Examples
    --------
    >>> plan = make_plan([5, 3], n_piles=2, seed=0)
    >>> arrays = [plan.counts, plan.piece_offsets, plan.block_lengths, plan.pile_sizes, plan.pile_offsets]
    >>> sum(array.nbytes for array in arrays) == plan_nbytes(2, 2)
    True
    """
    int64 = np.dtype(np.int64).itemsize
    return int64 * (n_blocks * n_piles + n_blocks * (n_piles + 1) + n_blocks + n_piles + n_piles + 1)


def auto_n_piles(n_rows: int, row_nbytes: int, pile_nbytes: int) -> int:
    """The fewest piles whose expected size plus six standard deviations fits ``pile_nbytes`` (which holds a row:
    :func:`~daskshuffle.plan._rules.choose_layout` checks it first).

    Examples
    --------
    >>> auto_n_piles(1_000_000, row_nbytes=100, pile_nbytes=10_000_000)
    11
    """
    capacity = pile_nbytes // max(row_nbytes, 1)
    # Solve s + 6 sqrt(s) = capacity for s.
    root = -3.0 + math.sqrt(9.0 + capacity)
    expected = max(root * root, 1.0)
    return max(1, math.ceil(n_rows / expected))


@dataclass(frozen=True)
class ShuffleSettings(Settings):
    """The parameters that define a shuffle's output, recorded in the pile store."""

    n_piles: int
    seed: int
    materialize: bool


def fingerprint(data: Any) -> str:
    """A short stable hash of JSON-serialisable ``data``."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
