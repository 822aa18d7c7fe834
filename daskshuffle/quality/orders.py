"""Reference orders, generated for a size without any data: what other loaders yield, and daskshuffle's own.

Each returns an order: ``order[i]`` is the source position of the ``i``-th row
yielded. Memory budgets are in rows, so orders can be compared at equal
memory: a shuffle buffer of ``b`` rows, ``cycle_length`` files interleaved into
a buffer, shards of ``shard_size`` rows, or piles of ``n / n_piles`` rows.

Examples
--------
>>> from daskshuffle.quality import orders
>>> orders.identity(5).tolist()
[0, 1, 2, 3, 4]
>>> sorted(orders.shuffle_buffer(6, buffer_size=2, seed=0).tolist())
[0, 1, 2, 3, 4, 5]
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .._parse import parse_positive_int
from .._random import make_rng
from ..epochs import (
    ORDERS,
    OrderOptions,
    buffer_stream,
    division_cuts,
    grouped_offsets,
    interleave_stream,
    order_from_options,
    pile_groups,
    stream_rows,
)
from ..plan import block_order, group_order, make_plan

__all__ = ["identity", "interleave", "piles", "shard_local", "shuffle_buffer", "uniform"]


def identity(n: int) -> NDArray[np.int64]:
    """No shuffle: the source order."""
    return np.arange(parse_positive_int(n, "n"), dtype=np.int64)


def uniform(n: int, seed: int = 0) -> NDArray[np.int64]:
    """A uniformly random permutation: what a full shuffle in memory gives."""
    return make_rng(seed, "quality-uniform").permutation(parse_positive_int(n, "n")).astype(np.int64)


def shuffle_buffer(n: int, buffer_size: int, seed: int = 0) -> NDArray[np.int64]:
    """A streaming shuffle buffer of ``buffer_size`` rows over the source in order (``tf.data``'s ``shuffle``).

    Pure Python per row: about a second per million rows.
    """
    n, buffer_size = parse_positive_int(n, "n"), parse_positive_int(buffer_size, "buffer_size")
    return buffer_stream(np.arange(n, dtype=np.int64), buffer_size, make_rng(seed, "quality-buffer"))


def interleave(n: int, n_files: int, cycle_length: int, buffer_size: int, seed: int = 0) -> NDArray[np.int64]:
    """``n_files`` files in a random order, ``cycle_length`` read round-robin a row at a time, into a buffer.

    What ``tf.data.Dataset.list_files(shuffle=True).interleave(cycle_length=k)
    .shuffle(buffer_size)`` yields: a file that ends is replaced by the next.
    """
    n, n_files = parse_positive_int(n, "n"), parse_positive_int(n_files, "n_files")
    cycle_length = parse_positive_int(cycle_length, "cycle_length")
    bounds = np.linspace(0, n, n_files + 1).astype(np.int64)
    files = [np.arange(bounds[f], bounds[f + 1]) for f in make_rng(seed, "quality-files").permutation(n_files)]
    stream = interleave_stream(files, cycle_length)
    return buffer_stream(stream, parse_positive_int(buffer_size, "buffer_size"), make_rng(seed, "quality-buffer"))


def shard_local(n: int, shard_size: int, seed: int = 0) -> NDArray[np.int64]:
    """Shards of ``shard_size`` rows in a random order, each shuffled whole: the order ``"py1s"`` over source shards."""
    n, shard_size = parse_positive_int(n, "n"), parse_positive_int(shard_size, "shard_size")
    shards = np.append(np.arange(0, n, shard_size), n).astype(np.int64)
    return ORDERS["py1s"](shards, seed, 0, division_cuts(n, 1, n), OrderOptions()).rows


def piles(
    n: int,
    n_piles: int,
    seed: int = 0,
    epoch: int = 0,
    block_rows: int | None = None,
    piles_in_memory: int = 1,
    order: str = "piles",
    shuffle_block_size: int | None = None,
    buffer_size: int | None = None,
    cycle_length: int | None = None,
) -> NDArray[np.int64]:
    """What :class:`~daskshuffle.PileLoader` yields in ``epoch`` from ``shuffle_zarr(..., n_piles, seed=seed)``.

    The plan's own functions, run in memory: pass 1 over blocks of
    ``block_rows`` rows (default ``n // 64``), the merge, then the loader's
    epoch: piles (or, with ``piles_in_memory=k``, groups of ``k`` piles dealt
    afresh each epoch) in a random order, each shuffled whole; or, with
    ``order`` and its options, the order ``PileLoader(order=...)`` yields
    on one rank.

    Examples
    --------
    >>> from daskshuffle.quality import orders
    >>> yielded = orders.piles(1000, 4, seed=0, order="py1b", shuffle_block_size=300)
    >>> sorted(yielded.tolist()) == list(range(1000))
    True
    """
    n, n_piles = parse_positive_int(n, "n"), parse_positive_int(n_piles, "n_piles")
    options: dict[str, object] = {
        "shuffle_block_size": shuffle_block_size,
        "buffer_size": buffer_size,
        "cycle_length": cycle_length,
    }
    chosen = order_from_options(order, options)
    name, parsed = chosen.name, chosen.options
    block_rows = block_rows or max(1, n // 64)
    lengths = [min(block_rows, n - start) for start in range(0, n, block_rows)]
    plan = make_plan(lengths, n_piles, seed)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    pieces = [np.arange(starts[b], starts[b + 1])[block_order(plan.counts[b], seed, b)] for b in range(plan.n_blocks)]
    stored = np.concatenate(pieces)[group_order(plan.counts, seed, 0, shuffled=True)]
    groups = pile_groups(n_piles, parse_positive_int(piles_in_memory, "piles_in_memory"), seed, epoch)
    if name != "piles":
        return stored[ORDERS[name](plan.pile_offsets, seed, epoch, division_cuts(n, 1, n), parsed).rows]
    if groups is None:
        return stored[stream_rows(plan.pile_offsets, seed, epoch, 0, n)].astype(np.int64)
    offsets = plan.pile_offsets  # groups laid end to end, then streamed as piles are
    regrouped = np.concatenate([stored[offsets[p] : offsets[p + 1]] for group in groups for p in group.tolist()])
    return regrouped[stream_rows(grouped_offsets(offsets, groups), seed, epoch, 0, n)].astype(np.int64)
