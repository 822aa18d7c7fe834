"""The loader's plan: an epoch's stream of rows (an order's), cut between ranks and batches (pure numpy).

Rank ``r`` takes the contiguous positions ``[r * share, (r + 1) * share)`` of the stream, all ranks
the same ``share``, so ranks are disjoint and yield as many batches; the rows past
``n_ranks * share`` are left out of the epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._random import make_rng

__all__ = [
    "BatchPlan",
    "IntArray",
    "epoch_pile_order",
    "lane_ranges",
    "n_batches",
    "plan_batches",
    "rank_range",
    "rank_share",
    "split_batches",
]

IntArray = NDArray[np.int64]


def epoch_pile_order(seed: int, epoch: int, n_piles: int) -> NDArray[np.intp]:
    """The order in which the piles are visited in ``epoch``."""
    return make_rng(seed, "epoch-piles", epoch).permutation(n_piles)


class Segment(NamedTuple):
    """Positions ``start:stop`` of read ``pile`` (counted from the read's start)."""

    pile: int
    start: int
    stop: int


def rank_share(n_rows: int, n_ranks: int, batch_size: int, drop_last: bool) -> int:
    """Rows of the stream each rank takes per epoch.

    With ``drop_last`` every rank's share is whole batches.

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


def lane_ranges(
    n_rows: int, n_lanes: int, world_size: int, rank: int, batch_size: int, drop_last: bool
) -> list[tuple[int, int]]:
    """The stream positions of the lanes that ``rank`` of ``world_size`` reads: ``n_lanes / world_size`` of them.

    The stream is cut into ``n_lanes`` lanes as if among that many ranks; global step ``t`` is
    micro-batch ``t`` of every lane, whatever the number of ranks.

    Examples
    --------
    >>> lane_ranges(100, n_lanes=4, world_size=2, rank=1, batch_size=10, drop_last=False)
    [(50, 75), (75, 100)]
    """
    per_rank = n_lanes // world_size
    micro = batch_size // per_rank
    return [
        rank_range(n_rows, n_lanes, lane, micro, drop_last) for lane in range(rank * per_rank, (rank + 1) * per_rank)
    ]


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

    Examples
    --------
    >>> [split_batches(5, 2, part) for part in range(2)]
    [(0, 2), (2, 5)]
    """
    return total * part // n_parts, total * (part + 1) // n_parts


def stream_segments(read_offsets: IntArray, start: int, stop: int) -> list[Segment]:
    """The parts of reads that make positions ``[start, stop)`` of a stream of reads end to end.

    Read ``r`` holds positions ``read_offsets[r]:read_offsets[r + 1]``; empty reads are left out.

    Examples
    --------
    >>> stream_segments(np.array([0, 4, 6, 10]), start=3, stop=9)  # reads of 4, 2 and 4 rows
    [Segment(pile=0, start=3, stop=4), Segment(pile=1, start=0, stop=2), Segment(pile=2, start=0, stop=3)]
    """
    sizes = np.diff(read_offsets)
    ends = np.cumsum(sizes)
    segments = []
    index = int(np.searchsorted(ends, start, side="right"))
    while index < len(sizes) and start < stop:
        begin = int(ends[index] - sizes[index])
        end = min(int(ends[index]), stop)
        if end > start:
            segments.append(Segment(index, start - begin, end - begin))
        start = max(start, end)
        index += 1
    return segments


class BatchPart(NamedTuple):
    """Positions ``start:stop`` of segment ``segment`` of a :class:`BatchPlan`, counted from the segment's start."""

    segment: int
    start: int
    stop: int


@dataclass(frozen=True)
class BatchPlan:
    """Which rows of which pile segments make each batch of a range of an epoch's batches.

    Iterating yields, for each batch, the parts of ``segments`` (the reads, in order) that make it;
    only the last batch may be shorter.

    Examples
    --------
    >>> plan = plan_batches(np.array([0, 4, 6, 10]), positions=(0, 10), batch_size=4)
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
    read_offsets: IntArray, positions: tuple[int, int], batch_size: int, first: int = 0, stop: int | None = None
) -> BatchPlan:
    """Batches ``first:stop`` of an epoch for the rank that takes the stream ``positions`` (its :func:`rank_range`).

    Read ``r`` holds positions ``read_offsets[r]:read_offsets[r + 1]`` of the stream; a segment's
    ``pile`` is the read. ``stop=None`` is the rank's last batch.

    Examples
    --------
    >>> plan = plan_batches(np.array([0, 4, 6, 10]), positions=(0, 10), batch_size=4, first=1)
    >>> [segment.pile for segment in plan.segments], len(plan)
    ([1, 2], 2)
    """
    begin, end = positions
    last = end if stop is None else min(begin + stop * batch_size, end)
    return BatchPlan(stream_segments(read_offsets, min(begin + first * batch_size, last), last), batch_size)
