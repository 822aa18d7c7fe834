"""The epoch of a mixture of pile stores: which copies of which rows, in which order.

Pure numpy, like :mod:`daskshuffle._orders`: the union of the streams' piles is
one sample space (each store's rows after the rows of the stores before it,
:func:`stream_offsets`), and :func:`mixed_order` gives an epoch of it as an
:class:`~daskshuffle._orders.EpochOrder`, which the loader cuts between ranks,
lanes and batches as it cuts any order.

A stream that puts ``count`` rows of its ``n`` into an epoch contributes
``count // n`` whole copies of each of its piles, and the rows of a uniform
sample of ``count % n`` of its rows (drawn afresh from ``(seed, "mix-extra",
epoch, stream)``), each pile's sampled rows together. Every such copy or part
is a *unit*, read and shuffled as a pile of its own, like a MosaicML shard
repeat: the units are visited in a random order (``(seed, "mix-units",
epoch)``) and each is shuffled (``(seed, "mix-rows", epoch)``), so a row's
copies are scattered over the epoch. Where two copies of a row would still
meet at the seam of two units, the later unit's first two rows are swapped
(or, for a unit of one row, the earlier unit's last two).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ._orders import EpochOrder
from ._random import make_rng

__all__ = ["mixed_order", "stream_offsets"]

IntArray = NDArray[np.int64]


def stream_offsets(pile_offsets: Sequence[IntArray]) -> tuple[IntArray, IntArray]:
    """The stores' piles laid end to end: the union's pile offsets, and the first pile of each store (and the end).

    Examples
    --------
    >>> offsets, first_piles = stream_offsets([np.array([0, 4, 6]), np.array([0, 3])])
    >>> offsets.tolist(), first_piles.tolist()
    ([0, 4, 6, 9], [0, 2, 3])
    """
    parts, shift = [np.zeros(1, dtype=np.int64)], 0
    for offsets in pile_offsets:
        parts.append(np.asarray(offsets[1:], dtype=np.int64) + shift)
        shift += int(offsets[-1])
    first_piles = np.concatenate([[0], np.cumsum([len(offsets) - 1 for offsets in pile_offsets])])
    return np.concatenate(parts).astype(np.int64), first_piles.astype(np.int64)


def _units(
    offsets: IntArray, first_piles: IntArray, counts: Sequence[int], seed: int, epoch: int
) -> tuple[IntArray, IntArray]:
    """Every row of the epoch (rows of the union) and the unit it belongs to, units numbered from 0 without gaps."""
    rows, units, next_unit = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)], 0
    for stream, count in enumerate(counts):
        p0, p1 = int(first_piles[stream]), int(first_piles[stream + 1])
        first, last = int(offsets[p0]), int(offsets[p1])
        n = last - first
        if n == 0 or count == 0:
            continue
        whole, extra = divmod(int(count), n)
        piles = np.searchsorted(offsets, np.arange(first, last), side="right") - 1 - p0
        for copy in range(whole):
            rows.append(np.arange(first, last, dtype=np.int64))
            units.append(next_unit + copy * (p1 - p0) + piles)
        if extra:
            chosen = np.sort(make_rng(seed, "mix-extra", epoch, stream).choice(n, extra, replace=False))
            rows.append((first + chosen).astype(np.int64))
            units.append(next_unit + whole * (p1 - p0) + piles[chosen])
        next_unit += (whole + 1) * (p1 - p0)
    all_units = np.concatenate(units)
    return np.concatenate(rows), np.unique(all_units, return_inverse=True)[1].astype(np.int64)


def _separate_copies(stream: IntArray, ends: IntArray) -> None:
    """Swap rows in place so that no two equal rows are neighbours at the seams ``ends`` of units."""
    starts = np.concatenate([[0], ends[:-1]])
    for unit in range(1, len(ends)):
        seam = int(starts[unit])
        if stream[seam - 1] != stream[seam]:
            continue
        if ends[unit] - seam >= 2:  # the rows of a unit are distinct
            stream[[seam, seam + 1]] = stream[[seam + 1, seam]]
        elif seam - starts[unit - 1] >= 2:
            stream[[seam - 2, seam - 1]] = stream[[seam - 1, seam - 2]]


def mixed_order(
    offsets: IntArray, first_piles: IntArray, counts: Sequence[int], seed: int, epoch: int, divisions: IntArray
) -> EpochOrder:
    """The epoch's stream of rows of the union (``offsets``, :func:`stream_offsets`), its units cut at ``divisions``.

    Stream ``s`` (piles ``first_piles[s]:first_piles[s + 1]``) puts
    ``counts[s]`` rows into the epoch: each row ``counts[s] // n`` or one more
    times, the rows that get one more a uniform sample, different every epoch.

    Examples
    --------
    >>> offsets, first_piles = stream_offsets([np.array([0, 4, 6]), np.array([0, 3])])
    >>> order = mixed_order(offsets, first_piles, [3, 6], seed=0, epoch=0, divisions=np.array([0, 9]))
    >>> np.bincount(order.rows, minlength=9).tolist()
    [0, 1, 0, 0, 1, 1, 2, 2, 2]
    >>> bool((np.diff(order.rows) != 0).all()), order.bounds.tolist()
    (True, [0, 3, 5, 8, 9])
    """
    rows, units = _units(offsets, first_piles, counts, seed, epoch)
    n_units = int(units.max()) + 1 if len(units) else 0
    place = np.empty(n_units, dtype=np.int64)
    place[make_rng(seed, "mix-units", epoch).permutation(n_units)] = np.arange(n_units)
    keys = make_rng(seed, "mix-rows", epoch).random(len(rows))
    stream = rows[np.lexsort((keys, place[units]))]
    ends = np.cumsum(np.bincount(place[units], minlength=n_units)).astype(np.int64)
    _separate_copies(stream, ends)
    bounds = np.unique(np.concatenate([[0], ends, np.asarray(divisions, dtype=np.int64)])).astype(np.int64)
    return EpochOrder(stream, bounds)
