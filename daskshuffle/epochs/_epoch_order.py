"""An epoch's order as a loader reads it: the stream of store rows, the units a read holds, and its runs.

What the orders of :data:`~daskshuffle.epochs._orders.ORDERS` share. An epoch's *sample space* is the
piles end to end in the epoch's visiting order, each in stored order (:func:`sample_space`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._random import make_rng
from ._epoch_plan import epoch_pile_order

__all__ = [
    "READ_GAP",
    "EpochOrder",
    "IntArray",
    "block_cuts",
    "cut_bounds",
    "division_cuts",
    "sample_space",
    "shuffle_units",
    "unit_reads",
]

IntArray = NDArray[np.int64]
#: Rows between two needed rows up to which a unit reads them in one run rather than two.
READ_GAP = 256


class EpochOrder(NamedTuple):
    """An epoch's stream: ``rows[i]`` is the store row at position ``i``; reads start at ``bounds``.

    ``bounds`` runs from 0 to the number of rows; a unit ``bounds[u]:bounds[u + 1]``
    is read and held at once, and never straddles a division.
    """

    rows: IntArray
    bounds: IntArray


def division_cuts(n_rows: int, n_divisions: int, share: int) -> IntArray:
    """The cuts of an epoch's stream between ``n_divisions`` ranks (or lanes) of ``share`` rows, and the tail.

    Examples
    --------
    >>> division_cuts(10, 3, 3).tolist()
    [0, 3, 6, 9, 10]
    >>> division_cuts(9, 3, 3).tolist()
    [0, 3, 6, 9]
    """
    return np.unique(np.append(np.arange(n_divisions + 1, dtype=np.int64) * share, n_rows)).astype(np.int64)


def sample_space(pile_offsets: IntArray, seed: int, epoch: int) -> tuple[IntArray, IntArray]:
    """The sample space: store rows of the piles in the epoch's visiting order, and where each pile ends."""
    visit = epoch_pile_order(seed, epoch, len(pile_offsets) - 1)
    sizes = np.diff(pile_offsets)[visit]
    ends = np.cumsum(sizes).astype(np.int64)
    shift = np.repeat(pile_offsets[:-1][visit] - (ends - sizes), sizes)
    return (np.arange(int(pile_offsets[-1]), dtype=np.int64) + shift).astype(np.int64), ends


def cut_bounds(*cuts: NDArray[np.integer] | Sequence[int]) -> IntArray:
    """The distinct positions of all ``cuts``, sorted: the bounds of the units they cut a stream into."""
    return np.unique(np.concatenate([np.asarray(c, dtype=np.int64) for c in cuts])).astype(np.int64)


def shuffle_units(rows: IntArray, bounds: IntArray, seed: int, purpose: str, epoch: int) -> EpochOrder:
    """``rows`` with each unit ``bounds[u]:bounds[u + 1]`` shuffled, from ``(seed, purpose, epoch, bounds[u])``."""
    out = rows.copy()
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        out[start:stop] = rows[start:stop][make_rng(seed, purpose, epoch, start).permutation(stop - start)]
    return EpochOrder(out, bounds)


def block_cuts(divisions: IntArray, size: int) -> IntArray:
    """Cuts every ``size`` positions from the start of each division."""
    return cut_bounds(*[np.arange(a, b, size) for a, b in itertools.pairwise(divisions.tolist())], divisions)


def unit_reads(rows: IntArray, gap: int = READ_GAP) -> tuple[list[tuple[int, int]], NDArray[np.intp]]:
    """The runs of store rows ``[start, stop)`` that hold ``rows``, and where each of ``rows`` is in those runs read end to end.

    Needed rows with at most ``gap`` rows between them are read in one run:
    fewer, larger reads, for up to ``gap`` rows more per run in memory.

    Examples
    --------
    >>> runs, index = unit_reads(np.array([7, 2, 3, 900]))
    >>> runs, index.tolist()
    ([(2, 8), (900, 901)], [5, 0, 1, 6])
    """
    needed = np.unique(rows)
    if not len(needed):
        return [], np.zeros(0, dtype=np.intp)
    breaks = np.flatnonzero(np.diff(needed) > gap + 1) + 1
    starts = needed[np.concatenate([[0], breaks])]
    stops = needed[np.concatenate([breaks - 1, [len(needed) - 1]])] + 1
    begins = np.concatenate([[0], np.cumsum(stops - starts)[:-1]])
    run = np.searchsorted(starts, rows, side="right") - 1
    index = (begins[run] + rows - starts[run]).astype(np.intp)
    return list(zip(starts.tolist(), stops.tolist(), strict=True)), index
