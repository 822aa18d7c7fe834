"""Two-level plans: reads that stay large however large the data.

Pure numpy, like :mod:`daskshuffle._plan`. A merge reads, from every block, the
range of its group of piles: about ``block x group / data`` bytes, which falls
with the square of the data (1 MiB at 4 GiB with 64 MiB blocks and groups,
64 KiB at 64 GiB, 0.4 KiB at 10 TiB). With two levels, pass 1 sends each row to
one of ``S`` *super-piles*; a second pass reads each super-pile's pieces (one
per first-level block, about ``block / S`` bytes each) in spans of about a
block, and sends each row to one of that super-pile's piles; the merge then
reads, from the second-level blocks of one super-pile only, reads ``S`` times
larger than a single level's. ``S = sqrt(data / group)`` makes the two equal.

Uniformity: super-pile ``s`` holds piles ``[lo_s, hi_s)``; a row goes to
``s`` with probability ``(hi_s - lo_s) / M`` (first level), then to each of
``s``'s piles with probability ``1 / (hi_s - lo_s)`` (second level),
independently of every other row: every row's pile is uniform over the
``M`` piles and independent, exactly as with one level. Draws are keyed by
seeds derived from the shuffle's seed, never by the seed itself, so a
single-level plan of the same seed is unchanged.

A plan that stays small: no ``blocks x piles`` (nor ``blocks x super-piles``)
matrix is drawn on the client. Blocks are cut into groups of about ``S``
blocks; the client draws each group's rows per super-pile (a multinomial), and
each span's rows per pile (a span, a second-level block, is one super-pile's
pieces of one group); how a group's rows split among its blocks is drawn from
the group's own generator by whichever task needs it, as a chain of
multivariate hypergeometric samples, which gives exactly the joint law of
independent multinomial rows. 1e10 rows in 38,147 blocks and 16,384 piles plan
in ``O(blocks + groups x piles)``: about 25 MB (``benchmarks/bench_plan.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from ._errors import DaskShuffleValueError
from ._plan import IntArray, _prepend_zero
from ._random import make_rng

__all__ = [
    "MIN_READS",
    "MIN_READ_NBYTES",
    "TwoLevelPlan",
    "block_table",
    "group_bounds",
    "make_two_level_plan",
    "merge_read_nbytes",
    "piece_offsets",
    "span_reads",
    "super_piles_for",
    "two_level_plan_nbytes",
    "wants_two_levels",
]

#: With ``levels="auto"``, a merge whose reads of pieces would be smaller than this, and at least
#: :data:`MIN_READS` of them, uses two levels instead: a few thousand small reads cost less than a
#: pass. On object storage a read (a GET) costs 10-50 ms, so reads of 1 MiB are already small there;
#: a local file read costs microseconds, and a second pass pays off only for reads of a few KiB
#: (``benchmarks/RESULTS.md``: 1 KiB reads, 1.8x faster with two levels).
MIN_READ_NBYTES = {"local": 64 * 2**10, "object": 2**20}
MIN_READS = 10_000


def derived_seed(seed: int, level: int) -> int:
    """The seed of level ``level``'s draws: from ``(seed, "level", level)``."""
    return int(make_rng(seed, "level", level).integers(0, 2**63 - 1))


def merge_read_nbytes(data_nbytes: float, block_nbytes: float, group_nbytes: float, n_super: int = 1) -> float:
    """About how many bytes each read of a merge takes, with ``n_super`` super-piles (1: a single level).

    Examples
    --------
    >>> merge_read_nbytes(4 * 2**30, 64 * 2**20, 64 * 2**20) / 2**20
    1.0
    """
    return block_nbytes * min(group_nbytes, data_nbytes) * n_super / max(data_nbytes, 1.0)


def wants_two_levels(data_nbytes: float, block_nbytes: float, n_blocks: int, storage: str) -> bool:
    """Whether ``levels="auto"`` uses two levels: at least ``MIN_READS`` merge reads of under ``MIN_READ_NBYTES``.

    ``storage`` is where the pieces go: ``"local"`` or ``"object"`` (a URL).

    Examples
    --------
    >>> gib = 2**30
    >>> [wants_two_levels(size * gib, 64 * 2**20, size * 16, "object") for size in (4, 8)]
    [False, True]
    """
    n_reads = n_blocks * math.ceil(data_nbytes / max(block_nbytes, 1.0))  # a read per block and group of piles
    small = merge_read_nbytes(data_nbytes, block_nbytes, block_nbytes) < MIN_READ_NBYTES[storage]
    return small and n_reads >= MIN_READS


def super_piles_for(data_nbytes: float, block_nbytes: float, group_nbytes: float, n_piles: int) -> int:
    """How many super-piles make a second level's two kinds of reads about equal: ``sqrt(data / group)``.

    At least 2 and at most half the piles (each super-pile holds two piles or more).

    Examples
    --------
    >>> super_piles_for(64 * 2**30, 64 * 2**20, 64 * 2**20, n_piles=512)
    32
    """
    wanted = round(math.sqrt(max(data_nbytes, 1.0) / max(group_nbytes, 1.0)))
    return max(2, min(wanted, n_piles // 2))


def super_pile_bounds(n_piles: int, n_super: int) -> IntArray:
    """``(n_super + 1,)``: super-pile ``s`` holds piles ``bounds[s]:bounds[s + 1]``, as equal as can be.

    Examples
    --------
    >>> super_pile_bounds(10, 4).tolist()
    [0, 3, 6, 8, 10]
    """
    if not 1 <= n_super <= n_piles:
        raise DaskShuffleValueError(f"Expected between 1 and {n_piles} super-piles. Got {n_super} instead.")
    sizes = np.full(n_super, n_piles // n_super, dtype=np.int64)
    sizes[: n_piles % n_super] += 1
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


@dataclass(frozen=True, eq=False)
class TwoLevelPlan:
    """Where every row goes in a two-level shuffle, held in ``O(blocks + piles x groups)`` on the client.

    The source's blocks are cut into *groups* of consecutive blocks of about
    ``n_super`` blocks' worth of rows. A second-level block, a *span*, is one
    super-pile's pieces of one group: about a block of rows. The client draws
    how many rows of each group go to each super-pile (``group_counts``) and
    how many rows of each span go to each of its super-pile's piles
    (``span_counts``); how a group's count splits among its blocks is drawn
    where it is needed, by :meth:`block_table`, from the group's own generator.

    Attributes
    ----------
    block_lengths : (n_blocks,) int64
        Rows in each block of the source.
    n_piles : int
        Piles of the output, ``M``.
    seed : int
        The shuffle's seed; each level draws from a seed derived from it.
    bounds : (n_super + 1,) int64
        Super-pile ``s`` holds piles ``bounds[s]:bounds[s + 1]``.
    group_bounds : (n_groups + 1,) int64
        Group ``g`` is blocks ``group_bounds[g]:group_bounds[g + 1]``.
    group_counts : (n_groups, n_super) int64
        Rows of group ``g`` that go to super-pile ``s``: span ``(s, g)``'s length.
    span_counts : tuple of (n_groups, piles of s) int64, one per super-pile
        ``span_counts[s][g, j]``: rows of span ``(s, g)`` that go to pile ``bounds[s] + j``.
    """

    block_lengths: IntArray
    n_piles: int
    seed: int
    bounds: IntArray
    group_bounds: IntArray
    group_counts: IntArray
    span_counts: tuple[IntArray, ...]

    @property
    def n_super(self) -> int:
        return len(self.bounds) - 1

    @property
    def n_groups(self) -> int:
        return len(self.group_bounds) - 1

    @property
    def n_blocks(self) -> int:
        return len(self.block_lengths)

    @property
    def n_spans(self) -> int:
        """Second-level blocks: span ``k`` is super-pile ``k // n_groups``'s pieces of group ``k % n_groups``."""
        return self.n_super * self.n_groups

    @cached_property
    def n_rows(self) -> int:
        return int(self.block_lengths.sum())

    @cached_property
    def first_seed(self) -> int:
        return derived_seed(self.seed, 1)

    @cached_property
    def second_seed(self) -> int:
        return derived_seed(self.seed, 2)

    @cached_property
    def pile_sizes(self) -> IntArray:
        """Rows in each pile, ``(n_piles,)``."""
        return np.concatenate([counts.sum(axis=0) for counts in self.span_counts]).astype(np.int64)

    @cached_property
    def pile_offsets(self) -> IntArray:
        """Pile ``j`` is rows ``pile_offsets[j]:pile_offsets[j + 1]`` of the output."""
        return _prepend_zero(np.cumsum(self.pile_sizes))

    @cached_property
    def span_lengths(self) -> IntArray:
        """Rows of each span, ``(n_spans,)``."""
        lengths: IntArray = np.ascontiguousarray(self.group_counts.T).reshape(-1)
        return lengths

    def group_of(self, block: int) -> tuple[int, int]:
        """``(group, index)``: block ``block`` is the ``index``-th block of its group."""
        group = int(np.searchsorted(self.group_bounds, block, side="right")) - 1
        return group, block - int(self.group_bounds[group])

    def group_draw(self, group: int) -> tuple[IntArray, IntArray, int, int]:
        """The arguments of :func:`block_table` for ``group``: what a task needs to draw it."""
        a, b = self.group_bounds[group], self.group_bounds[group + 1]
        return self.block_lengths[a:b], self.group_counts[group], self.first_seed, group

    def block_table(self, group: int) -> IntArray:
        """``(blocks of the group, n_super)``: rows of each of the group's blocks that go to each super-pile."""
        return block_table(*self.group_draw(group))

    def span_counts_of(self, span: int) -> tuple[IntArray, int]:
        """``(counts, lo)``: span ``span``'s rows for each pile of its super-pile, whose first pile is ``lo``."""
        s, group = divmod(span, self.n_groups)
        return self.span_counts[s][group], int(self.bounds[s])

    def merge_columns(self, start: int, stop: int) -> tuple[int, IntArray, IntArray]:
        """What a merge of piles ``[start, stop)`` reads: see :meth:`Plan.merge_columns`; its blocks are spans."""
        first = int(np.searchsorted(self.bounds, start, side="right")) - 1
        last = int(np.searchsorted(self.bounds, stop - 1, side="right")) - 1
        n_groups = self.n_groups
        counts = np.zeros(((last - first + 1) * n_groups, stop - start), dtype=np.int64)
        read_starts = np.zeros((last - first + 1) * n_groups, dtype=np.int64)
        for index, s in enumerate(range(first, last + 1)):
            lo, hi = int(self.bounds[s]), int(self.bounds[s + 1])
            a, b = max(lo, start), min(hi, stop)
            rows = slice(index * n_groups, (index + 1) * n_groups)
            counts[rows, a - start : b - start] = self.span_counts[s][:, a - lo : b - lo]
            read_starts[rows] = self.span_counts[s][:, : a - lo].sum(axis=1)
        return first * n_groups, counts, read_starts


def group_bounds(block_lengths: IntArray, group_rows: int) -> IntArray:
    """``(n_groups + 1,)``: consecutive whole blocks cut into groups of at least ``group_rows`` rows (the last may be short).

    Examples
    --------
    >>> group_bounds(np.array([4, 4, 4, 4, 4]), group_rows=8).tolist()
    [0, 2, 4, 5]
    """
    ends = np.cumsum(block_lengths, dtype=np.int64)
    n_blocks, total = len(ends), int(ends[-1]) if len(ends) else 0
    targets = np.arange(1, -(-total // max(group_rows, 1)), dtype=np.int64) * max(group_rows, 1)
    # A group ends with the first block whose end reaches its target.
    cuts = np.minimum(np.searchsorted(ends, targets, side="left") + 1, n_blocks)
    return np.unique(np.concatenate([[0], cuts, [n_blocks]])).astype(np.int64)


def block_table(lengths: IntArray, totals: IntArray, seed: int, group: int) -> IntArray:
    """How a group's rows per super-pile split among its blocks: ``(len(lengths), len(totals))``.

    Given the group's ``totals`` (each of its rows went to super-pile ``s``
    independently, ``totals[s]`` of them in all), the rows of its blocks are an
    exchangeable sequence: block after block takes a multivariate
    hypergeometric sample of what is left, from the generator keyed
    ``(seed, "block-counts", group)``. The table has exactly the distribution
    of independent multinomial rows, one per block, drawn with the group's total.

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


def span_reads(table: IntArray, first_block: int, s: int) -> list[tuple[int, int, int]]:
    """Span ``(s, group)``'s reads ``(block, start, stop)`` of first-level pieces, from the group's :func:`block_table`.

    Examples
    --------
    >>> span_reads(np.array([[1, 2], [0, 3]]), first_block=4, s=1)
    [(4, 1, 3), (5, 0, 3)]
    """
    starts = table[:, :s].sum(axis=1)
    return [
        (first_block + index, int(start), int(start + size))
        for index, (start, size) in enumerate(zip(starts.tolist(), table[:, s].tolist(), strict=True))
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


def make_two_level_plan(
    block_lengths: NDArray[np.integer] | Sequence[int], n_piles: int, n_super: int, seed: int, block_rows: int
) -> TwoLevelPlan:
    """Draw a two-level plan: ``n_super`` super-piles, then ``n_piles`` piles; spans of about ``block_rows`` rows.

    Client time and memory are ``O(blocks + groups x piles)`` (groups: about
    ``blocks / n_super``), vectorised: no ``blocks x piles`` matrix is ever made.

    Examples
    --------
    >>> plan = make_two_level_plan([40, 40, 40], n_piles=4, n_super=2, seed=0, block_rows=50)
    >>> int(plan.pile_sizes.sum()), plan.n_piles, plan.n_super, plan.n_groups  # groups of 100 rows or so
    (120, 4, 2, 1)
    >>> plan.span_counts[0].shape  # super-pile 0's spans, one per group, fill its piles 0 and 1 only
    (1, 2)
    """
    lengths = np.asarray(block_lengths, dtype=np.int64).reshape(-1)
    bounds = super_pile_bounds(n_piles, n_super)
    groups = group_bounds(lengths, n_super * max(int(block_rows), 1))
    group_lengths = np.add.reduceat(lengths, groups[:-1]) if len(lengths) else np.zeros(0, dtype=np.int64)
    widths = np.diff(bounds)
    group_counts = make_rng(derived_seed(seed, 1), "group-counts").multinomial(group_lengths, widths / n_piles)
    group_counts = np.asarray(group_counts, dtype=np.int64).reshape(len(group_lengths), n_super)
    second_seed = derived_seed(seed, 2)
    span_counts = tuple(
        np.asarray(
            make_rng(second_seed, "span-counts", s).multinomial(group_counts[:, s], np.full(width, 1.0 / width)),
            dtype=np.int64,
        ).reshape(len(group_lengths), width)
        for s, width in enumerate(widths.tolist())
    )
    return TwoLevelPlan(
        block_lengths=lengths,
        n_piles=int(n_piles),
        seed=int(seed),
        bounds=bounds,
        group_bounds=groups,
        group_counts=group_counts,
        span_counts=span_counts,
    )


def two_level_plan_nbytes(n_blocks: int, n_super: int, n_piles: int, n_groups: int) -> int:
    """Bytes a :class:`TwoLevelPlan` holds on the client: ``span_counts`` (``groups x piles``) dominate.

    Examples
    --------
    >>> plan = make_two_level_plan([40] * 30, n_piles=12, n_super=3, seed=0, block_rows=40)
    >>> arrays = [plan.block_lengths, plan.bounds, plan.group_bounds, plan.group_counts, *plan.span_counts]
    >>> arrays += [plan.pile_sizes, plan.pile_offsets]
    >>> sum(a.nbytes for a in arrays) == two_level_plan_nbytes(30, 3, 12, plan.n_groups)
    True
    """
    int64 = np.dtype(np.int64).itemsize
    return int64 * (
        n_blocks + (n_super + 1) + (n_groups + 1) + n_groups * n_super + n_groups * n_piles + 2 * n_piles + 1
    )
