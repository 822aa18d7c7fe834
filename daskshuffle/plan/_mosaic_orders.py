"""The orders that shuffle stretches of an epoch's sample space: ``"piles"``, ``"naive"`` and MosaicML's.

MosaicML Streaming's ``py1s``, ``py2s``, ``py1b``, ``py1br`` and ``py1e``, with
a pile in the part of a shard and the divisions (ranks or lanes) in that of
canonical nodes, beside the loader's own ``"piles"`` and a uniform
permutation. Each has the signature of
:data:`~daskshuffle.plan._epoch_order.OrderFunction`. Randomness comes only from
:func:`~daskshuffle._random.make_rng` keyed by ``(seed, purpose, epoch, ...)``.
"""

from __future__ import annotations

import numpy as np

from .._random import make_rng
from ._epoch_order import EpochOrder, IntArray, OrderOptions, block_cuts, sample_space, shuffle_units, unit_bounds
from ._epoch_plan import epoch_pile_order, stream_rows

__all__ = ["naive", "piles", "py1b", "py1br", "py1br_bounds", "py1e", "py1e_ranges", "py1s", "py2s"]


def piles(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """The loader's own: piles in a random order, each shuffled whole (a read per pile)."""
    rows = stream_rows(offsets, seed, epoch, 0, int(offsets[-1]))
    ends = np.cumsum(np.diff(offsets)[epoch_pile_order(seed, epoch, len(offsets) - 1)])
    return EpochOrder(rows, unit_bounds([0], ends))


def naive(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """A uniform permutation of all rows: each division reads, at once, every pile it has a row of."""
    return EpochOrder(make_rng(seed, "order-naive", epoch).permutation(int(offsets[-1])).astype(np.int64), divisions)


def py1s(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, cut between divisions, each part shuffled alone (a boundary pile's parts in stored order)."""
    space, ends = sample_space(offsets, seed, epoch)
    bounds = unit_bounds([0], ends, divisions)
    return EpochOrder(shuffle_units(space, bounds, seed, "order-py1s", epoch), bounds)


def py2s(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, each shuffled, then cut between divisions and each part shuffled again."""
    first = piles(offsets, seed, epoch, divisions, options)
    bounds = unit_bounds(first.bounds, divisions)
    return EpochOrder(shuffle_units(first.rows, bounds, seed, "order-py2s", epoch), bounds)


def py1b(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Piles in a random order, each division cut into blocks of ``shuffle_block_size`` rows, each block shuffled."""
    space, _ = sample_space(offsets, seed, epoch)
    bounds = block_cuts(divisions, int(options.shuffle_block_size or 1))
    return EpochOrder(shuffle_units(space, bounds, seed, "order-py1b", epoch), bounds)


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
    return unit_bounds([0], *cuts)


def py1br(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """py1b with blocks of random sizes in ``[0.75, 1.25) * shuffle_block_size``, staggered between divisions."""
    space, _ = sample_space(offsets, seed, epoch)
    bounds = py1br_bounds(divisions, int(options.shuffle_block_size or 1), seed, epoch)
    return EpochOrder(shuffle_units(space, bounds, seed, "order-py1br", epoch), bounds)


def py1e_ranges(
    offsets: IntArray, seed: int, epoch: int, divisions: IntArray, block: int
) -> tuple[IntArray, IntArray, IntArray]:
    """py1e's extended ranges: the sample space, and the ``[low, high)`` of positions each of its rows is spread over.

    A pile's part of ``m`` rows at ``[s, e)`` of a division ``[a, b)`` spreads
    over ``[s - (block - m) / 2, e + (block - m) / 2)``, clipped to the division.
    """
    space, ends = sample_space(offsets, seed, epoch)
    cuts = unit_bounds([0], ends, divisions)
    sizes = np.diff(cuts)
    pad = np.maximum(0.0, (block - sizes) / 2)
    division = np.searchsorted(divisions, cuts[:-1], side="right") - 1
    low = np.maximum(cuts[:-1] - pad, divisions[division])
    high = np.minimum(cuts[1:] + pad, divisions[division + 1])
    return space, np.repeat(low, sizes), np.repeat(high, sizes)


def py1e(offsets: IntArray, seed: int, epoch: int, divisions: IntArray, options: OrderOptions) -> EpochOrder:
    """Each pile's rows spread at random over its range extended to ``shuffle_block_size`` rows, in each division."""
    block = int(options.shuffle_block_size or 1)
    space, low, high = py1e_ranges(offsets, seed, epoch, divisions, block)
    keys = low + (high - low) * make_rng(seed, "order-py1e", epoch).random(len(space))
    rows = np.empty_like(space)
    for a, b in zip(divisions[:-1].tolist(), divisions[1:].tolist(), strict=True):
        rows[a:b] = space[a:b][np.argsort(keys[a:b], kind="stable")]
    return EpochOrder(rows, block_cuts(divisions, block))
