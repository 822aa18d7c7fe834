"""tf.data's orders: ``"buffer"`` (``shuffle(buffer_size)``) and ``"interleave"`` (``interleave`` then ``shuffle``).

A pile plays the part of a tf.data file, read in stored order. Each order has
the signature of :data:`~daskshuffle.plan._epoch_order.OrderFunction`; each
division (rank or lane) runs its own buffer, from
:func:`~daskshuffle._random.make_rng` keyed by ``(seed, purpose, epoch, division)``.
"""

from __future__ import annotations

import numpy as np

from .._random import make_rng
from ._epoch_order import EpochOrder, IntArray, OrderOptions, block_cuts, per_division, sample_space

__all__ = ["BUFFERS_PER_UNIT", "buffer", "buffer_stream", "interleave", "interleave_stream"]

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


def buffer(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, in stored order, through a shuffle buffer of ``buffer_size`` rows per division."""
    size = int(options.buffer_size or 1)
    space, ends = sample_space(offsets, seed, epoch)
    rows = per_division(
        space,
        ends,
        divisions,
        lambda d, stream, _: buffer_stream(stream, size, make_rng(seed, "order-buffer", epoch, d)),
    )
    return EpochOrder(rows, block_cuts(divisions, BUFFERS_PER_UNIT * size))


def interleave(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, ``cycle_length`` at a time read a row each in turn, into a buffer of ``buffer_size``."""
    size, cycle = int(options.buffer_size or 1), int(options.cycle_length or 1)
    space, ends = sample_space(offsets, seed, epoch)

    def make(d: int, stream: IntArray, parts: list[IntArray]) -> IntArray:
        return buffer_stream(interleave_stream(parts, cycle), size, make_rng(seed, "order-interleave", epoch, d))

    return EpochOrder(per_division(space, ends, divisions, make), block_cuts(divisions, BUFFERS_PER_UNIT * size))
