"""The orders a :class:`~daskshuffle.PileLoader` can yield an epoch in: one pure function each, in :data:`ORDERS`.

Each is an :data:`OrderFunction` of the order's object: the store row at every position of the
epoch's stream (an :class:`EpochOrder`), and where the loader's reads start. ``"naive"``, MosaicML
Streaming's orders and tf.data's buffer orders; the loader's own, ``"piles"``, is
:mod:`daskshuffle.epochs._unit_plan`. An epoch's *sample space* is the piles end to end in the
epoch's visiting order, each in stored order (:func:`sample_space`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._random import make_rng
from ._epoch_plan import IntArray, epoch_pile_order
from ._order_classes import Buffer, Interleave, Order, Py1b, Py1br, Py1e

__all__ = [
    "ORDERS",
    "READ_GAPS",
    "EpochOrder",
    "buffer_stream",
    "division_cuts",
    "interleave_stream",
    "unit_reads",
]

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


def naive(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, order: Order) -> EpochOrder:
    """A uniform permutation of all rows: each division reads, at once, every pile it has a row of."""
    return EpochOrder(make_rng(seed, "order-naive", epoch).permutation(int(offsets[-1])).astype(np.int64), divisions)


def py1s(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, order: Order) -> EpochOrder:
    """Piles in a random order, cut between divisions, each part shuffled alone (a boundary pile's parts in stored order)."""
    space, ends = sample_space(offsets, seed, epoch)
    return shuffle_units(space, cut_bounds([0], ends, divisions), seed, "order-py1s", epoch)


def py2s(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, order: Order) -> EpochOrder:
    """Piles in a random order, each shuffled, then cut between divisions and each part shuffled again."""
    space, ends = sample_space(offsets, seed, epoch)
    piles = shuffle_units(space, cut_bounds([0], ends), seed, "order-py2s-piles", epoch).rows
    return shuffle_units(piles, cut_bounds([0], ends, divisions), seed, "order-py2s", epoch)


def py1b(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, order: Py1b) -> EpochOrder:
    """Piles in a random order, each division cut into blocks of ``shuffle_block_size`` rows, each block shuffled."""
    space, _ = sample_space(offsets, seed, epoch)
    return shuffle_units(space, block_cuts(divisions, order.shuffle_block_size), seed, "order-py1b", epoch)


def py1br_bounds(divisions: IntArray, block: int, seed: int, epoch: int) -> IntArray:
    """py1br's blocks: sizes uniform in ``[0.75, 1.25) * block``; each division's first block cut short at random."""
    low, high = max(1, int(0.75 * block)), max(2, int(1.25 * block))
    cuts = [divisions]
    for d, (a, b) in enumerate(zip(divisions[:-1].tolist(), divisions[1:].tolist(), strict=True)):
        rng = make_rng(seed, "order-py1br-blocks", epoch, d)
        sizes = rng.integers(low, high, size=(b - a) // low + 2)
        sizes[0] = rng.integers(1, sizes[0] + 1)  # the stagger: divisions do not start new blocks in step
        starts = a + np.cumsum(sizes)
        cuts.append(starts[starts < b])
    return cut_bounds([0], *cuts)


def py1br(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, order: Py1br) -> EpochOrder:
    """py1b with blocks of random sizes in ``[0.75, 1.25) * shuffle_block_size``, staggered between divisions."""
    space, _ = sample_space(offsets, seed, epoch)
    bounds = py1br_bounds(divisions, order.shuffle_block_size, seed, epoch)
    return shuffle_units(space, bounds, seed, "order-py1br", epoch)


def py1e_ranges(
    offsets: IntArray, seed: int, epoch: int, divisions: IntArray, block: int
) -> tuple[IntArray, IntArray, IntArray]:
    """py1e's extended ranges: the sample space, and the ``[low, high)`` of positions each of its rows is spread over.

    A pile's part of ``m`` rows at ``[s, e)`` of a division ``[a, b)`` spreads
    over ``[s - (block - m) / 2, e + (block - m) / 2)``, clipped to the division.
    """
    space, ends = sample_space(offsets, seed, epoch)
    cuts = cut_bounds([0], ends, divisions)
    sizes = np.diff(cuts)
    pad = np.maximum(0.0, (block - sizes) / 2)
    division = np.searchsorted(divisions, cuts[:-1], side="right") - 1
    low = np.maximum(cuts[:-1] - pad, divisions[division])
    high = np.minimum(cuts[1:] + pad, divisions[division + 1])
    return space, np.repeat(low, sizes), np.repeat(high, sizes)


def py1e(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, order: Py1e) -> EpochOrder:
    """Each pile's rows spread at random over its range extended to ``shuffle_block_size`` rows, in each division."""
    block = order.shuffle_block_size
    space, low, high = py1e_ranges(offsets, seed, epoch, divisions, block)
    keys = low + (high - low) * make_rng(seed, "order-py1e", epoch).random(len(space))
    rows = np.empty_like(space)
    for a, b in zip(divisions[:-1].tolist(), divisions[1:].tolist(), strict=True):
        rows[a:b] = space[a:b][np.argsort(keys[a:b], kind="stable")]
    return EpochOrder(rows, block_cuts(divisions, block))


#: The units of "buffer" and "interleave", in buffers: a row stays in the buffer for about a buffer's
#: outputs, so a unit of ``k`` buffers reads about ``k + 5`` buffers of rows (about twice each row per epoch
#: for 4, five times for 1).
BUFFERS_PER_UNIT = 4


def buffer_stream(stream: IntArray, buffer_size: int, rng: np.random.Generator) -> IntArray:
    """tf.data's ``shuffle(buffer_size)`` over ``stream``: fill a buffer, hand out a random slot, refill it.

    Row ``stream[p]`` comes out at a position ``>= p - buffer_size + 1``.
    Pure Python per row: about a second per million rows.

    Examples
    --------
    >>> out = buffer_stream(np.arange(6), 2, np.random.default_rng(0))
    >>> sorted(out.tolist())
    [0, 1, 2, 3, 4, 5]
    """
    n, size = len(stream), min(buffer_size, len(stream))
    buffer = np.asarray(stream[:size], dtype=np.int64).copy()
    out = np.empty(n, dtype=np.int64)
    # Slots are drawn in bulk: draw i is uniform over the buffer as it is at output i.
    fill = size
    for i, u in enumerate(rng.random(n).tolist()):
        live = size if fill < n else size - (i - (n - size))
        slot = int(u * live)
        out[i] = buffer[slot]
        if fill < n:
            buffer[slot] = stream[fill]
            fill += 1
        else:  # the input is spent: close the gap with the last live element
            buffer[slot] = buffer[live - 1]
    return out


def interleave_stream(files: list[IntArray], cycle_length: int) -> IntArray:
    """tf.data's ``interleave(cycle_length, block_length=1)``: ``cycle_length`` files read a row at a time in turn.

    A file that ends is replaced, in its place in the cycle, by the next.

    Examples
    --------
    >>> interleave_stream([np.arange(0, 3), np.arange(3, 5), np.arange(5, 7)], 2).tolist()
    [0, 3, 1, 4, 2, 5, 6]
    """
    lists = [f.tolist() for f in files if len(f)]
    # Each open file: its rows and the next one to read.
    open_files, waiting = [[rows, 0] for rows in lists[:cycle_length]], lists[cycle_length:][::-1]
    out: list[int] = []
    while open_files:
        kept = []
        for span in open_files:
            rows, at = span
            out.append(rows[at])
            if at + 1 < len(rows):
                kept.append([rows, at + 1])
            elif waiting:
                kept.append([waiting.pop(), 0])
        open_files = kept
    return np.asarray(out, dtype=np.int64)


def buffer(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, order: Buffer | Interleave) -> EpochOrder:
    """Piles in a random order through a shuffle buffer of ``buffer_size`` rows per division ("buffer", "interleave").

    Each pile in stored order, or, with ``cycle_length`` ("interleave"), that many piles at a time read a
    row each in turn (:func:`interleave_stream`).
    """
    size = order.buffer_size
    cycle = order.cycle_length if isinstance(order, Interleave) else None
    purpose = "order-buffer" if cycle is None else "order-interleave"
    space, ends = sample_space(offsets, seed, epoch)
    rows = np.empty_like(space)
    for d, (a, b) in enumerate(itertools.pairwise(divisions.tolist())):
        stream = space[a:b]
        if cycle is not None:
            cuts = np.concatenate([[a], ends[(ends > a) & (ends < b)], [b]]).tolist()
            stream = interleave_stream([space[start:stop] for start, stop in itertools.pairwise(cuts)], cycle)
        rows[a:b] = buffer_stream(stream, size, make_rng(seed, purpose, epoch, d))
    return EpochOrder(rows, block_cuts(divisions, BUFFERS_PER_UNIT * size))


#: An order's function: the offsets of the piles, the seed, the epoch, the divisions, and the order (of its own class).
OrderFunction = Callable[[IntArray, int, int, IntArray, Any], EpochOrder]
#: Every order but the loader's own (``"piles"``, units in groups), by name: one pure function each, with one signature.
ORDERS: dict[str, OrderFunction] = {
    "naive": naive,
    "py1s": py1s,
    "py2s": py2s,
    "py1b": py1b,
    "py1br": py1br,
    "py1e": py1e,
    "buffer": buffer,
    "interleave": buffer,
}
#: Rows a read may take between two rows its unit needs, by order: none for the orders whose units are stretches
#: of the sample space, read exactly (rows between two of their runs belong to other units), else
#: :data:`READ_GAP`.
READ_GAPS: dict[str, int] = {name: 0 if name in ("py1s", "py1b", "py1br") else READ_GAP for name in ORDERS}
