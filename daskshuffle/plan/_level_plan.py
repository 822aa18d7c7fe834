"""Plans of two or more levels, drawn in ``O(blocks + groups x piles)`` on the client.

Each level but the last sends each block's rows to one of ``fanout`` sub-super-piles of the block's
super-pile; the last sends them to the piles of their super-pile. A level's blocks are cut into
*groups* of about ``fanout`` blocks' rows; the next level's blocks are the *spans*, one
sub-super-pile's pieces of one group. The client draws each group's rows per sub-super-pile; how
they split among the group's blocks (:func:`block_table`) is drawn where needed, and has exactly the
law of independent multinomial rows, so every row's pile is uniform, as with one level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from .._random import make_rng
from ._plan import IntArray, PlanBase, _prepend_zero

__all__ = ["GroupedLevel", "LevelPlan", "block_table", "group_bounds", "make_level_plan", "piece_offsets", "span_reads"]


def derived_seed(seed: int, level: int) -> int:
    """The seed of level ``level``'s draws: from ``(seed, "level", level)``, never the seed itself."""
    return int(make_rng(seed, "level", level).integers(0, 2**63 - 1))


@dataclass(frozen=True, eq=False)
class GroupedLevel:
    """A level before the last: each block's rows go to the ``fanout`` sub-super-piles of its super-pile.

    Attributes
    ----------
    block_lengths : (n_blocks,) int64
        Rows of each of the level's blocks; a super-pile's blocks are consecutive.
    group_bounds : (n_groups + 1,) int64
        Group ``g`` is blocks ``group_bounds[g]:group_bounds[g + 1]``, all of one super-pile.
    super_groups : (n_super + 1,) int64
        The groups of super-pile ``s`` are ``super_groups[s]:super_groups[s + 1]``.
    group_counts : (n_groups, fanout) int64
        Rows of group ``g`` that go to each sub-super-pile of its super-pile.
    seed : int
        The level's seed.
    """

    block_lengths: IntArray
    group_bounds: IntArray
    super_groups: IntArray
    group_counts: IntArray
    seed: int

    @property
    def fanout(self) -> int:
        return int(self.group_counts.shape[1])

    @property
    def n_groups(self) -> int:
        return len(self.group_bounds) - 1

    @property
    def n_spans(self) -> int:
        return self.n_groups * self.fanout

    @cached_property
    def next_super_blocks(self) -> IntArray:
        """``(n_super * fanout + 1,)``: the next level's blocks (spans) of sub-super-pile ``s * fanout + c`` start here."""
        groups = np.diff(self.super_groups)
        starts = self.fanout * self.super_groups[:-1, None] + np.arange(self.fanout)[None, :] * groups[:, None]
        return np.append(starts.reshape(-1), self.n_spans).astype(np.int64)

    @cached_property
    def spans(self) -> tuple[IntArray, IntArray]:
        """``(group, child)`` of each span, in span order: by sub-super-pile, then group."""
        span = np.arange(self.n_spans, dtype=np.int64)
        first = self.fanout * self.super_groups[:-1]
        s = np.searchsorted(first, span, side="right") - 1
        groups = np.diff(self.super_groups)[s]
        offset = span - first[s]
        return self.super_groups[s] + offset % np.maximum(groups, 1), offset // np.maximum(groups, 1)

    @cached_property
    def span_lengths(self) -> IntArray:
        """Rows of each span: the next level's block lengths."""
        group, child = self.spans
        lengths: IntArray = self.group_counts[group, child]
        return lengths

    @cached_property
    def block_groups(self) -> tuple[list[int], list[int]]:
        """``(group, index)`` of each block: it is the ``index``-th block of its group."""
        sizes = np.diff(self.group_bounds)
        group = np.repeat(np.arange(self.n_groups), sizes)
        return group.tolist(), (np.arange(len(self.block_lengths)) - self.group_bounds[group]).tolist()

    def group_draw(self, group: int) -> tuple[IntArray, IntArray, int, int]:
        """The arguments of :func:`block_table` for ``group``: what a task needs to draw it."""
        a, b = self.group_bounds[group], self.group_bounds[group + 1]
        return self.block_lengths[a:b], self.group_counts[group], self.seed, group


@dataclass(frozen=True, eq=False)
class LevelPlan(PlanBase):
    """Where every row goes in a shuffle of ``n_levels >= 2`` levels (and :class:`PlanBase`'s attributes).

    Attributes
    ----------
    levels : tuple of GroupedLevel
        Every level but the last.
    bounds : (n_super + 1,) int64
        The last level's super-piles: super-pile ``s`` holds piles ``bounds[s]:bounds[s + 1]``.
    super_blocks : (n_super + 1,) int64
        The last level's blocks of super-pile ``s`` are ``super_blocks[s]:super_blocks[s + 1]``.
    counts : tuple of (blocks of s, piles of s) int64, one per last-level super-pile
        ``counts[s][k, j]``: rows of the super-pile's ``k``-th block that go to pile ``bounds[s] + j``.
    """

    levels: tuple[GroupedLevel, ...]
    bounds: IntArray
    super_blocks: IntArray
    counts: tuple[IntArray, ...]

    @property
    def n_levels(self) -> int:
        return len(self.levels) + 1

    @property
    def n_super(self) -> int:
        """Super-piles of the last level."""
        return len(self.bounds) - 1

    @property
    def fanouts(self) -> list[int]:
        return [level.fanout for level in self.levels]

    @cached_property
    def last_seed(self) -> int:
        return derived_seed(self.seed, self.n_levels)

    @cached_property
    def pile_sizes(self) -> IntArray:
        return np.concatenate([counts.sum(axis=0) for counts in self.counts]).astype(np.int64)

    @cached_property
    def _block_super(self) -> IntArray:
        return np.repeat(np.arange(self.n_super), np.diff(self.super_blocks))

    def last_counts(self, block: int) -> tuple[IntArray, int]:
        """``(counts, lo)``: last-level block ``block``'s rows for each pile of its super-pile, the first being ``lo``."""
        s = int(self._block_super[block])
        return self.counts[s][block - int(self.super_blocks[s])], int(self.bounds[s])

    def merge_columns(self, start: int, stop: int) -> tuple[int, IntArray, IntArray]:
        """What a merge of piles ``[start, stop)`` reads: see :meth:`Plan.merge_columns`; its blocks are the last level's."""
        first = int(np.searchsorted(self.bounds, start, side="right")) - 1
        last = int(np.searchsorted(self.bounds, stop - 1, side="right")) - 1
        base, end = int(self.super_blocks[first]), int(self.super_blocks[last + 1])
        counts = np.zeros((end - base, stop - start), dtype=np.int64)
        read_starts = np.zeros(end - base, dtype=np.int64)
        for s in range(first, last + 1):
            lo, hi = int(self.bounds[s]), int(self.bounds[s + 1])
            a, b = max(lo, start), min(hi, stop)
            rows = slice(int(self.super_blocks[s]) - base, int(self.super_blocks[s + 1]) - base)
            counts[rows, a - start : b - start] = self.counts[s][:, a - lo : b - lo]
            read_starts[rows] = self.counts[s][:, : a - lo].sum(axis=1)
        return base, counts, read_starts


def split_bounds(sizes: IntArray, fanout: int) -> IntArray:
    """Each of the ranges of ``sizes`` piles cut into ``fanout`` ranges as equal as can be: the new bounds.

    Examples
    --------
    >>> split_bounds(np.array([10]), 4).tolist()
    [0, 3, 6, 8, 10]
    >>> split_bounds(np.array([3, 2]), 2).tolist()
    [0, 2, 3, 4, 5]
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    parts = sizes[:, None] // fanout + (np.arange(fanout)[None, :] < sizes[:, None] % fanout)
    return _prepend_zero(np.cumsum(parts.reshape(-1)))


def group_bounds(block_lengths: IntArray, group_rows: int) -> IntArray:
    """``(n_groups + 1,)``: consecutive whole blocks cut into groups of about ``group_rows`` rows.

    Examples
    --------
    >>> group_bounds(np.array([4, 4, 4, 4, 4]), group_rows=8).tolist()
    [0, 2, 4, 5]
    """
    ends = np.cumsum(block_lengths, dtype=np.int64)
    n_blocks, total = len(ends), int(ends[-1]) if len(ends) else 0
    step = max(group_rows, 1)
    targets = np.arange(1, -(-total // step), dtype=np.int64) * step
    cuts = np.minimum(np.searchsorted(ends, targets, side="left") + 1, n_blocks)
    return np.unique(np.concatenate([[0], cuts, [n_blocks]])).astype(np.int64)


def block_table(lengths: IntArray, totals: IntArray, seed: int, group: int) -> IntArray:
    """How a group's rows per sub-super-pile split among its blocks: ``(len(lengths), len(totals))``.

    Block after block takes a multivariate hypergeometric sample of what is left of ``totals``:
    exactly the law of independent multinomial rows conditioned on the group's totals.

    Examples
    --------
    >>> table = block_table(np.array([3, 5]), np.array([6, 2]), seed=0, group=0)
    >>> table.sum(axis=1).tolist(), table.sum(axis=0).tolist()
    ([3, 5], [6, 2])
    """
    table = np.zeros((len(lengths), len(totals)), dtype=np.int64)
    if not len(lengths):
        return table
    rng = make_rng(seed, "block-counts", group)
    remaining = np.asarray(totals, dtype=np.int64).copy()
    for index, length in enumerate(np.asarray(lengths)[:-1].tolist()):
        if length:
            table[index] = rng.multivariate_hypergeometric(remaining, int(length))
            remaining -= table[index]
    table[-1] = remaining
    return table


def span_reads(table: IntArray, first_block: int, child: int) -> list[tuple[int, int, int]]:
    """A span's reads ``(block, start, stop)`` of its group's pieces for sub-super-pile ``child``.

    ``table`` is the group's :func:`block_table`; its first block is ``first_block``.

    Examples
    --------
    >>> span_reads(np.array([[1, 2], [0, 3]]), first_block=4, child=1)
    [(4, 1, 3), (5, 0, 3)]
    """
    starts = table[:, :child].sum(axis=1)
    return [
        (first_block + index, int(start), int(start + size))
        for index, (start, size) in enumerate(zip(starts.tolist(), table[:, child].tolist(), strict=True))
        if size
    ]


def piece_offsets(counts: IntArray, lo: int, n_piles: int) -> IntArray:
    """``(n_piles + 1,)``: where each pile's piece starts in a block's pieces that go to piles ``lo, lo + 1, ...`` only.

    Examples
    --------
    >>> piece_offsets(np.array([2, 3]), lo=1, n_piles=4).tolist()
    [0, 0, 2, 5, 5]
    """
    offsets = np.zeros(n_piles + 1, dtype=np.int64)
    offsets[lo + 1 : lo + 1 + len(counts)] = np.cumsum(counts)
    offsets[lo + 1 + len(counts) :] = offsets[lo + len(counts)]
    return offsets


def _grouped_level(
    lengths: IntArray, super_blocks: IntArray, child_piles: IntArray, seed: int, group_rows: int
) -> GroupedLevel:
    """Cut each super-pile's blocks into groups and draw each group's rows per sub-super-pile."""
    n_super, fanout = child_piles.shape
    bounds, super_groups = [np.zeros(1, dtype=np.int64)], [0]
    for s in range(n_super):
        a, b = int(super_blocks[s]), int(super_blocks[s + 1])
        cuts = group_bounds(lengths[a:b], group_rows)[1:] + a
        bounds.append(cuts)
        super_groups.append(super_groups[-1] + len(cuts))
    groups = np.concatenate(bounds)
    group_lengths = np.add.reduceat(lengths, groups[:-1]) if len(groups) > 1 else np.zeros(0, dtype=np.int64)
    group_counts = np.zeros((len(group_lengths), fanout), dtype=np.int64)
    for s in range(n_super):
        rows = slice(super_groups[s], super_groups[s + 1])
        weights = child_piles[s] / child_piles[s].sum()
        group_counts[rows] = make_rng(seed, "group-counts", s).multinomial(group_lengths[rows], weights)
    return GroupedLevel(
        block_lengths=lengths,
        group_bounds=groups,
        super_groups=np.asarray(super_groups, dtype=np.int64),
        group_counts=group_counts,
        seed=seed,
    )


def make_level_plan(
    block_lengths: NDArray[np.integer] | Sequence[int],
    n_piles: int,
    fanouts: Sequence[int],
    seed: int,
    block_rows: int,
) -> LevelPlan:
    """Draw a plan of ``len(fanouts) + 1`` levels; level ``l`` splits each super-pile into ``fanouts[l]``.

    ``block_rows`` is about the rows of a block at every level; the product of the fanouts is at
    most ``n_piles``.

    Examples
    --------
    >>> plan = make_level_plan([40, 40, 40], n_piles=4, fanouts=[2], seed=0, block_rows=50)
    >>> int(plan.pile_sizes.sum()), plan.n_levels, plan.n_super, plan.bounds.tolist()
    (120, 2, 2, [0, 2, 4])
    >>> plan = make_level_plan([40] * 12, n_piles=8, fanouts=[2, 2], seed=0, block_rows=40)
    >>> plan.n_levels, plan.bounds.tolist(), int(plan.pile_sizes.sum())
    (3, [0, 2, 4, 6, 8], 480)
    """
    source = lengths = np.asarray(block_lengths, dtype=np.int64).reshape(-1)
    bounds = np.array([0, n_piles], dtype=np.int64)
    super_blocks = np.array([0, len(lengths)], dtype=np.int64)
    levels: list[GroupedLevel] = []
    for index, fanout in enumerate(fanouts, start=1):
        children = split_bounds(np.diff(bounds), fanout)
        child_piles = np.diff(children).reshape(-1, fanout)
        level = _grouped_level(lengths, super_blocks, child_piles, derived_seed(seed, index), fanout * block_rows)
        levels.append(level)
        lengths, super_blocks, bounds = level.span_lengths, level.next_super_blocks, children
    last_seed = derived_seed(seed, len(levels) + 1)
    counts = []
    for s, width in enumerate(np.diff(bounds).tolist()):
        rows = lengths[super_blocks[s] : super_blocks[s + 1]]
        drawn = make_rng(last_seed, "last-counts", s).multinomial(rows, np.full(width, 1.0 / width))
        counts.append(np.asarray(drawn, dtype=np.int64).reshape(len(rows), width))
    return LevelPlan(
        block_lengths=source,
        n_piles=int(n_piles),
        seed=int(seed),
        levels=tuple(levels),
        bounds=bounds,
        super_blocks=super_blocks,
        counts=tuple(counts),
    )
