"""Reference orders, generated for a size without any data: what other loaders yield, and daskshuffle's own.

Each returns an order: ``order[i]`` is the source position of the ``i``-th row yielded. Memory
budgets are in rows, so orders can be compared at equal memory.

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

from .._errors import DaskShuffleValueError
from .._parse import parse_positive_int
from .._random import make_rng
from ..epochs import (
    ORDERS,
    Order,
    OrderName,
    Piles,
    buffer_stream,
    deal_groups,
    division_cuts,
    epoch_runs,
    group_permutation,
    interleave_stream,
    parse_order,
    unit_bounds,
    unit_sizes,
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
    return ORDERS["py1s"](shards, seed, 0, division_cuts(n, 1, n), parse_order("py1s")).rows


def _store(n: int, n_piles: int, seed: int, block_rows: int | None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The pile offsets of the store ``shuffle_zarr(..., n_piles, seed=seed)`` writes, and the source position of each row."""
    block_rows = parse_positive_int(block_rows or max(1, n // 64), "block_rows")
    lengths = [min(block_rows, n - start) for start in range(0, n, block_rows)]
    plan = make_plan(lengths, n_piles, seed)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    pieces = [np.arange(starts[b], starts[b + 1])[block_order(plan.counts[b], seed, b)] for b in range(plan.n_blocks)]
    stored = np.concatenate(pieces)[group_order(plan.counts, seed, 0)]
    return plan.pile_offsets, stored.astype(np.int64)


def piles(
    n: int,
    n_piles: int,
    seed: int = 0,
    epoch: int = 0,
    *,
    order: Order | OrderName,
    unit_rows: int | None = None,
    row_nbytes: float = 1,
    block_rows: int | None = None,
) -> NDArray[np.int64]:
    """What :class:`~daskshuffle.PileLoader` yields in ``epoch`` from ``shuffle_zarr(..., n_piles, seed=seed)``.

    The source position of each row yielded on one rank, by the plan's and the loader's own
    functions run in memory: the store the shuffle writes (blocks of ``block_rows`` rows, default
    ``n // 64``), read as ``PileLoader(order=order)`` reads it. With ``order=Piles(budget=...)``
    the store is read in units of ``unit_rows`` rows (its chunks), and the budget is in bytes of
    rows of ``row_nbytes`` bytes (by default 1: rows); a real loader's choice is in
    ``loader.settings.unit_rows`` and ``group_rows``. Another order
    (``ds.orders.Py1b(shuffle_block_size=300)``, say) reads as it says and takes no ``unit_rows``.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> from daskshuffle.quality import orders
    >>> yielded = orders.piles(1000, 4, seed=0, order=ds.orders.Piles(budget=400), unit_rows=50)  # 4 units a group
    >>> sorted(yielded.tolist()) == list(range(1000))
    True
    >>> yielded = orders.piles(1000, 4, seed=0, order=ds.orders.Py1b(shuffle_block_size=300))
    >>> sorted(yielded.tolist()) == list(range(1000))
    True
    """
    n, n_piles = parse_positive_int(n, "n"), parse_positive_int(n_piles, "n_piles")
    chosen = parse_order(order)
    offsets, stored = _store(n, n_piles, seed, block_rows)
    if not isinstance(chosen, Piles):
        if unit_rows is not None:
            raise DaskShuffleValueError(
                f"Expected unit_rows= with order=Piles(...) only. Got it with order={chosen!r} instead: "
                "its reads are its own (shuffle_block_size, buffer_size); leave it out.",
                parameter="unit_rows",
            )
        return stored[ORDERS[chosen.name](offsets, seed, epoch, division_cuts(n, 1, n), chosen).rows]
    if chosen.budget == "auto" or unit_rows is None:
        raise DaskShuffleValueError(
            "Expected order=Piles(budget=...) with a size (in bytes of rows of row_nbytes) and unit_rows= (rows of a "
            f"chunk of the store). Got order={chosen!r} and unit_rows={unit_rows!r} instead.",
            parameter="order" if chosen.budget == "auto" else "unit_rows",
        )
    row = max(float(row_nbytes), 1.0)
    chunk = parse_positive_int(unit_rows, "unit_rows")
    group_rows, (unit,) = unit_sizes(int(chosen.budget), row, [({"": chunk}, {"": max(1, round(row))})], n)
    runs = epoch_runs(unit_bounds(n, unit), seed, epoch)
    _, groups = deal_groups(runs[:, 1] - runs[:, 0], group_rows, seed, epoch)
    out = [np.zeros(0, dtype=np.int64)]
    for index, group in enumerate(groups):
        rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in runs[group].tolist()])
        out.append(rows[group_permutation(len(rows), seed, epoch, index)])
    return stored[np.concatenate(out)].astype(np.int64)
