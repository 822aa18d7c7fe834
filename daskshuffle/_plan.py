"""The plan: where every row goes, computed before any byte is read.

Pure numpy: no I/O, no dask, no zarr. Which pile a row goes to does not depend
on the data, so the whole layout of a shuffle is a function of the block
lengths, the number of piles and the seed:

- ``counts[i, j]``, the rows of block ``i`` that go to pile ``j``, is drawn as
  ``Multinomial(len_i, 1/M)`` from the generator keyed ``(seed, "counts", i)``;
- which rows of block ``i`` those are is a uniformly random assignment with
  those counts, keyed ``(seed, "rows", i)``; inside a piece rows keep their
  source order, so piles stay chronological;
- a pile is the concatenation of its pieces in block order.

Together this is exactly "every row goes to a uniformly random pile,
independently", the first pass of the 2-pass shuffle.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ._errors import DaskShuffleValueError
from ._parse import Settings
from ._random import make_rng

__all__ = [
    "BatchPart",
    "BatchPlan",
    "Plan",
    "Segment",
    "auto_n_piles",
    "block_order",
    "epoch_pile_order",
    "group_order",
    "group_piles",
    "make_plan",
    "n_batches",
    "pile_permutation",
    "plan_batches",
    "rank_range",
    "rank_share",
    "split_batches",
    "stream_rows",
    "stream_segments",
]

IntArray = NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Plan:
    """The layout of one shuffle: how many rows of each block go to each pile.

    Attributes
    ----------
    block_lengths : (n_blocks,) int64
        Rows in each input block, in source order.
    n_piles : int
        Number of piles ``M``.
    seed : int
        The seed every draw is keyed by.
    counts : (n_blocks, n_piles) int64
        ``counts[i, j]`` rows of block ``i`` go to pile ``j``.
    """

    block_lengths: IntArray
    n_piles: int
    seed: int
    counts: IntArray

    @property
    def n_blocks(self) -> int:
        return len(self.block_lengths)

    @cached_property
    def n_rows(self) -> int:
        return int(self.block_lengths.sum())

    @cached_property
    def pile_sizes(self) -> IntArray:
        """Rows in each pile, ``(n_piles,)``."""
        sizes: IntArray = self.counts.sum(axis=0)
        return sizes

    @cached_property
    def pile_offsets(self) -> IntArray:
        """Pile ``j`` is rows ``pile_offsets[j]:pile_offsets[j + 1]`` of the output."""
        return _prepend_zero(np.cumsum(self.pile_sizes))

    @cached_property
    def piece_offsets(self) -> IntArray:
        """``(n_blocks, n_piles + 1)``: piece ``(i, j)`` is rows
        ``piece_offsets[i, j]:piece_offsets[i, j + 1]`` of block ``i``'s pieces."""
        offsets = np.zeros((self.n_blocks, self.n_piles + 1), dtype=np.int64)
        np.cumsum(self.counts, axis=1, out=offsets[:, 1:])
        return offsets


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
    if (lengths < 0).any():
        raise DaskShuffleValueError(f"Expected block lengths >= 0. Got {lengths.tolist()} instead.")
    if n_piles < 1:
        raise DaskShuffleValueError(f"Expected n_piles to be a positive integer. Got {n_piles} instead.")
    counts = np.zeros((len(lengths), n_piles), dtype=np.int64)
    pvals = np.full(n_piles, 1.0 / n_piles)
    for block, length in enumerate(lengths):
        if length:
            counts[block] = make_rng(seed, "counts", block).multinomial(int(length), pvals)
    return Plan(block_lengths=lengths, n_piles=int(n_piles), seed=int(seed), counts=counts)


def _smallest_uint(n: int) -> type[np.unsignedinteger[Any]]:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if n <= np.iinfo(dtype).max:
            return dtype
    return np.uint64


def block_order(counts: IntArray, seed: int, block: int) -> NDArray[np.intp]:
    """Rows of ``block`` in piece order: all of pile 0's rows, then pile 1's, ...

    ``counts`` is the block's row of :attr:`Plan.counts`. Inside a piece rows
    keep their source order. ``rows[block_order(...)]`` is what pass 1 writes
    for the block; piece ``j`` is the slice
    ``plan.piece_offsets[block, j]:plan.piece_offsets[block, j + 1]`` of it.

    Examples
    --------
    >>> plan = make_plan([6], n_piles=2, seed=0)
    >>> order = block_order(plan.counts[0], plan.seed, 0)
    >>> sorted(order.tolist())
    [0, 1, 2, 3, 4, 5]
    """
    n_piles = len(counts)
    piles = np.repeat(np.arange(n_piles, dtype=_smallest_uint(n_piles)), counts)
    assignment = make_rng(seed, "rows", block).permutation(piles)
    # A stable sort of small unsigned integers is a radix sort: linear time.
    return np.argsort(assignment, kind="stable")


def group_piles(pile_sizes: IntArray, row_nbytes: int, target_nbytes: int) -> list[tuple[int, int]]:
    """Cut piles into runs ``[start, stop)`` of about ``target_nbytes`` each.

    Each run holds whole piles and at least one; a pile larger than the target
    is a run of its own. Empty piles join their neighbours.

    Examples
    --------
    >>> group_piles(np.array([2, 2, 2, 5, 1]), row_nbytes=1, target_nbytes=4)
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    """
    groups: list[tuple[int, int]] = []
    start, filled = 0, 0
    for pile, size in enumerate(pile_sizes.tolist()):
        nbytes = size * row_nbytes
        if filled and filled + nbytes > target_nbytes:
            groups.append((start, pile))
            start, filled = pile, 0
        filled += nbytes
    if len(pile_sizes):
        groups.append((start, len(pile_sizes)))
    return groups


def group_order(counts: IntArray, seed: int, start: int, *, materialize: bool) -> NDArray[np.intp]:
    """Order the pieces of piles ``start, start + 1, ...`` read from every block into piles.

    ``counts`` is ``plan.counts[:, start:stop]``. The input rows are the
    concatenation, over blocks in order, of each block's pieces for those
    piles. ``parts[group_order(...)]`` is the piles laid end to end, each pile
    its pieces in block order; with ``materialize=True`` the rows of each pile
    are also shuffled with the generator keyed ``(seed, "materialize", pile)``.

    Examples
    --------
    >>> counts = np.array([[1, 2], [1, 0]])  # block 0 gave 1 row to pile 0 and 2 to pile 1
    >>> group_order(counts, seed=0, start=0, materialize=False).tolist()
    [0, 3, 1, 2]
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
    if materialize:
        sizes = counts.sum(axis=0)
        for pile, (offset, size) in enumerate(zip(pile_starts.tolist(), sizes.tolist(), strict=True), start=start):
            if size > 1:
                segment = order[offset : offset + size]
                order[offset : offset + size] = segment[make_rng(seed, "materialize", pile).permutation(size)]
    return order


def auto_n_piles(n_rows: int, row_nbytes: int, pile_nbytes: int) -> int:
    """The fewest piles whose expected size plus six standard deviations fits ``pile_nbytes``.

    With ``s`` rows expected per pile the largest of them rarely exceeds
    ``s + 6 * sqrt(s)``, so ``s`` is the largest value for which that fits.

    Examples
    --------
    >>> auto_n_piles(1_000_000, row_nbytes=100, pile_nbytes=10_000_000)
    11
    """
    capacity = pile_nbytes // max(row_nbytes, 1)
    if capacity < 1:
        raise DaskShuffleValueError(
            f"Expected pile_memory to hold at least one row of {row_nbytes} bytes. Got {pile_nbytes} bytes instead."
        )
    # Solve s + 6 sqrt(s) = capacity for s.
    root = -3.0 + math.sqrt(9.0 + capacity)
    expected = max(root * root, 1.0)
    return max(1, math.ceil(n_rows / expected))


def epoch_pile_order(seed: int, epoch: int, n_piles: int) -> NDArray[np.intp]:
    """The order in which the piles are visited in ``epoch``."""
    return make_rng(seed, "epoch-piles", epoch).permutation(n_piles)


def pile_permutation(seed: int, epoch: int, pile: int, size: int) -> NDArray[np.intp]:
    """The in-RAM shuffle of ``pile`` in ``epoch``."""
    return make_rng(seed, "epoch-rows", epoch, pile).permutation(size)


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


# -- the loader: an epoch's stream of rows, cut between ranks and batches ----------
#
# Epoch ``e`` visits the piles in ``epoch_pile_order(seed, e, n_piles)`` and
# shuffles each with ``pile_permutation(seed, e, pile, size)``; the epoch's
# *stream* is those shuffled piles end to end. Rank ``r`` of ``n_ranks`` takes
# the contiguous positions ``[r * share, (r + 1) * share)`` of the stream, all
# ranks the same ``share``, so that ranks are disjoint, yield the same number of
# batches, and each reads only its own piles plus at most one it shares with
# each neighbour. The rows past ``n_ranks * share`` are left out of the epoch;
# they are the tail of the last pile visited, so they change with the epoch.


class Segment(NamedTuple):
    """Positions ``start:stop`` of ``pile`` after the pile is shuffled for the epoch."""

    pile: int
    start: int
    stop: int


def rank_share(n_rows: int, n_ranks: int, batch_size: int, drop_last: bool) -> int:
    """Rows of the stream each rank takes per epoch.

    Without ``drop_last`` fewer than ``n_ranks`` rows are left out; with it,
    every rank's share is whole batches and fewer than ``n_ranks * batch_size``
    rows are left out.

    Examples
    --------
    >>> rank_share(10, n_ranks=3, batch_size=2, drop_last=False)
    3
    >>> rank_share(10, n_ranks=3, batch_size=2, drop_last=True)
    2
    """
    if drop_last:
        return n_rows // (n_ranks * batch_size) * batch_size
    return n_rows // n_ranks


def rank_range(n_rows: int, n_ranks: int, rank: int, batch_size: int, drop_last: bool) -> tuple[int, int]:
    """The positions ``[start, stop)`` of the epoch's stream that ``rank`` takes.

    Examples
    --------
    >>> [rank_range(10, 3, rank, batch_size=2, drop_last=False) for rank in range(3)]
    [(0, 3), (3, 6), (6, 9)]
    """
    share = rank_share(n_rows, n_ranks, batch_size, drop_last)
    return rank * share, (rank + 1) * share


def n_batches(n_rows: int, batch_size: int, drop_last: bool) -> int:
    """Batches that ``n_rows`` rows make: a last, partial batch counts unless ``drop_last``.

    Examples
    --------
    >>> n_batches(10, 4, drop_last=False), n_batches(10, 4, drop_last=True)
    (3, 2)
    """
    return n_rows // batch_size if drop_last else -(-n_rows // batch_size)


def split_batches(total: int, n_parts: int, part: int) -> tuple[int, int]:
    """Part ``part`` of ``n_parts`` contiguous, near-equal runs ``[first, stop)`` of ``total`` batches.

    Used to divide a rank's batches between data-loading worker processes:
    contiguous runs keep each worker on its own piles.

    Examples
    --------
    >>> [split_batches(5, 2, part) for part in range(2)]
    [(0, 2), (2, 5)]
    """
    return total * part // n_parts, total * (part + 1) // n_parts


def stream_segments(pile_offsets: IntArray, pile_order: NDArray[np.integer], start: int, stop: int) -> list[Segment]:
    """The pieces of shuffled piles that make positions ``[start, stop)`` of an epoch's stream.

    ``pile_order`` is the epoch's :func:`epoch_pile_order`. Empty piles and
    piles outside the range are left out, so a rank reads only what it needs.

    Examples
    --------
    >>> offsets = np.array([0, 4, 6, 10])  # piles of 4, 2 and 4 rows
    >>> stream_segments(offsets, np.array([2, 0, 1]), start=3, stop=9)
    [Segment(pile=2, start=3, stop=4), Segment(pile=0, start=0, stop=4), Segment(pile=1, start=0, stop=1)]
    """
    sizes = np.diff(pile_offsets)[pile_order]
    ends = np.cumsum(sizes)
    segments = []
    index = int(np.searchsorted(ends, start, side="right"))
    while index < len(sizes) and start < stop:
        begin = int(ends[index] - sizes[index])
        end = min(int(ends[index]), stop)
        if end > start:
            segments.append(Segment(int(pile_order[index]), start - begin, end - begin))
        start = max(start, end)
        index += 1
    return segments


def stream_rows(pile_offsets: IntArray, seed: int, epoch: int, start: int, stop: int) -> IntArray:
    """The store rows at positions ``[start, stop)`` of epoch ``epoch``'s stream.

    What a loader yields, as row numbers: the reference its tests compare with.

    Examples
    --------
    >>> rows = stream_rows(np.array([0, 4, 6, 10]), seed=0, epoch=0, start=0, stop=10)
    >>> sorted(rows.tolist())
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    order = epoch_pile_order(seed, epoch, len(pile_offsets) - 1)
    parts = [np.zeros(0, dtype=np.int64)]
    for pile, begin, end in stream_segments(pile_offsets, order, start, stop):
        size = int(pile_offsets[pile + 1] - pile_offsets[pile])
        parts.append(pile_offsets[pile] + pile_permutation(seed, epoch, pile, size)[begin:end])
    return np.concatenate(parts).astype(np.int64, copy=False)


class BatchPart(NamedTuple):
    """Positions ``start:stop`` of segment ``segment`` of a :class:`BatchPlan`, counted from the segment's start."""

    segment: int
    start: int
    stop: int


@dataclass(frozen=True)
class BatchPlan:
    """Which rows of which pile segments make each batch of a range of an epoch's batches.

    ``segments`` are the reads, in order (as :func:`stream_segments` gives
    them); iterating yields, for each batch, the parts of those segments that
    make it, in order: a batch that runs across a pile boundary has a part of
    each pile. Batches are cut every ``batch_size`` positions of the
    segments end to end; only the last may be shorter.

    Examples
    --------
    >>> plan = plan_batches(np.array([0, 4, 6, 10]), seed=0, epoch=0, positions=(0, 10), batch_size=4)
    >>> len(plan), [sum(part.stop - part.start for part in batch) for batch in plan]
    (3, [4, 4, 2])
    """

    segments: list[Segment]
    batch_size: int

    @property
    def n_rows(self) -> int:
        return sum(segment.stop - segment.start for segment in self.segments)

    def __len__(self) -> int:
        return n_batches(self.n_rows, self.batch_size, drop_last=False)

    def __iter__(self) -> Iterator[tuple[BatchPart, ...]]:
        # Lazily: an epoch may have millions of batches.
        parts: list[BatchPart] = []
        filled = 0
        for index, segment in enumerate(self.segments):
            position, size = 0, segment.stop - segment.start
            while position < size:
                take = min(self.batch_size - filled, size - position)
                parts.append(BatchPart(index, position, position + take))
                position += take
                filled += take
                if filled == self.batch_size:
                    yield tuple(parts)
                    parts, filled = [], 0
        if parts:
            yield tuple(parts)


def plan_batches(
    pile_offsets: IntArray,
    seed: int,
    epoch: int,
    positions: tuple[int, int],
    batch_size: int,
    first: int = 0,
    stop: int | None = None,
) -> BatchPlan:
    """Batches ``first:stop`` of ``epoch`` for the rank that takes the stream ``positions`` (its :func:`rank_range`).

    ``stop=None`` is the rank's last batch. What :class:`~daskshuffle.PileLoader`
    reads and yields, and what ``daskshuffle.torch`` splits between worker
    processes; positions past the end of the rank's range are left out.

    Examples
    --------
    >>> plan = plan_batches(np.array([0, 4, 6, 10]), seed=0, epoch=0, positions=(0, 10), batch_size=4, first=1)
    >>> [segment.pile for segment in plan.segments], len(plan)
    ([2, 0], 2)
    """
    begin, end = positions
    last = end if stop is None else min(begin + stop * batch_size, end)
    order = epoch_pile_order(seed, epoch, len(pile_offsets) - 1)
    segments = stream_segments(pile_offsets, order, min(begin + first * batch_size, last), last)
    return BatchPlan(segments, batch_size)
