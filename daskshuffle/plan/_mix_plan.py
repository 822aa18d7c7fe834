"""The epoch of a mixture of pile stores: which copies of which rows, in which order.

Pure numpy, like :mod:`daskshuffle.plan._orders`: the union of the streams' piles is
one sample space (each store's rows after the rows of the stores before it,
:func:`stream_offsets`), and :func:`mixed_order` gives an epoch of it as an
:class:`~daskshuffle.plan._epoch_order.EpochOrder`, which the loader cuts between ranks,
lanes and batches as it cuts any order.

A stream that puts ``count`` rows of its ``n`` into an epoch contributes
``count // n`` whole copies of each of its piles, and the rows of a uniform
sample of ``count % n`` of its rows (drawn afresh from ``(seed, "mix-extra",
epoch, stream)``), each pile's sampled rows together. Every such copy or part
is a *unit*, read and shuffled as a pile of its own, like a MosaicML shard
repeat: the units are visited in a random order (``(seed, "mix-units",
epoch)``) and each is shuffled (``(seed, "mix-rows", epoch)``), so a row's
copies are scattered over the epoch. Where two copies of a row would still
meet at the seam of two units, rows within the units are swapped
(:func:`_separate_copies`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from .._random import make_rng
from ._epoch_order import EpochOrder

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
    """Every row of the epoch (rows of the union), unit after unit, and the number of rows of each unit."""
    rows, sizes = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    for stream, count in enumerate(counts):
        p0, p1 = int(first_piles[stream]), int(first_piles[stream + 1])
        bounds = offsets[p0 : p1 + 1]
        first, last = int(bounds[0]), int(bounds[-1])
        if last == first or count == 0:
            continue
        whole, extra = divmod(int(count), last - first)
        for _ in range(whole):
            rows.append(np.arange(first, last, dtype=np.int64))
            sizes.append(np.diff(bounds))
        if extra:
            chosen = first + np.sort(
                make_rng(seed, "mix-extra", epoch, stream).choice(last - first, extra, replace=False)
            )
            rows.append(chosen.astype(np.int64))
            sizes.append(np.bincount(np.searchsorted(bounds, chosen, side="right") - 1, minlength=p1 - p0))
    all_sizes = np.concatenate(sizes).astype(np.int64)
    return np.concatenate(rows), all_sizes[all_sizes > 0]


def _separate_copies(stream: IntArray, ends: IntArray, piles: IntArray) -> None:
    """Reorder rows within units, in place, so that no two copies of a row meet at a seam of units.

    A unit's rows are distinct, so only a seam between two units of one pile
    (``piles``: each unit's) can hold two copies of a row. Along each run of
    such units, each unit's first and last rows are chosen among its first
    two rows and its last one (a choice of three is enough to avoid one row
    at each end), keeping the shuffled order wherever it already works: a
    small dynamic programme over the run. Only a pile of one row, whose copies
    follow each other, leaves two copies side by side.
    """
    stops = ends.tolist()
    starts = [0, *stops[:-1]][: len(stops)]
    same = np.flatnonzero(piles[1:] == piles[:-1])
    if not len(same):
        return
    runs = np.split(same, np.flatnonzero(np.diff(same) > 1) + 1)
    for run in runs:
        first, last = int(run[0]), int(run[-1]) + 1
        _separate_run(stream, starts[first : last + 1], stops[first : last + 1])


def _separate_run(stream: IntArray, starts: list[int], stops: list[int]) -> None:
    choices: list[list[tuple[int, int]]] = []
    for start, stop in zip(starts, stops, strict=True):
        ends = sorted({start, start + 1, stop - 1} & set(range(start, stop)))
        pairs = [(a, b) for a in ends for b in ends if a != b] or [(start, start)]
        # The shuffled order first: it stays wherever it works.
        pairs.sort(key=lambda pair: pair != (start, stop - 1))
        choices.append(pairs)
    # best[u][i]: the choice of unit u - 1 that allows choice i of unit u, or -1 (the first unit) / None (none).
    best: list[list[int | None]] = [[-1] * len(choices[0])]
    for u in range(1, len(choices)):
        row = []
        for a, _ in choices[u]:
            allowed = [
                i for i, (_, b) in enumerate(choices[u - 1]) if best[u - 1][i] is not None and stream[b] != stream[a]
            ]
            row.append(allowed[0] if allowed else None)
        best.append(row)
    feasible = [i for i, found in enumerate(best[-1]) if found is not None]
    if not feasible:
        return
    picked, i = [], feasible[0]
    for u in range(len(choices) - 1, -1, -1):
        picked.append(choices[u][i])
        i = best[u][i]  # type: ignore[assignment]
    for (start, stop), (a, b) in zip(zip(starts, stops, strict=True), reversed(picked), strict=True):
        if (a, b) != (start, stop - 1):
            positions = np.arange(start, stop)
            middle = positions[(positions != a) & (positions != b)]
            stream[start:stop] = stream[np.concatenate([[a], middle, [b]]) if a != b else [a]]


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
    rows, sizes = _units(offsets, first_piles, counts, seed, epoch)
    visit = make_rng(seed, "mix-units", epoch).permutation(len(sizes))
    placed = sizes[visit]
    ends = np.cumsum(placed).astype(np.int64)
    # Unit visit[i] goes to place i: each row moves by the shift between where its unit starts and where it goes.
    shift = (np.cumsum(sizes) - sizes)[visit] - (ends - placed)
    stream = rows[np.repeat(shift, placed) + np.arange(len(rows))]
    rng = make_rng(seed, "mix-rows", epoch)
    for start, stop in zip((ends - placed).tolist(), ends.tolist(), strict=True):
        rng.shuffle(stream[start:stop])
    _separate_copies(stream, ends, np.searchsorted(offsets, stream[ends - 1], side="right"))
    bounds = np.unique(np.concatenate([[0], ends, np.asarray(divisions, dtype=np.int64)])).astype(np.int64)
    return EpochOrder(stream, bounds)
