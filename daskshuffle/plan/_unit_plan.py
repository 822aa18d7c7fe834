"""The loader's plan for a store whose piles are stored shuffled: units smaller than piles, mixed in groups.

Pure numpy, like :mod:`daskshuffle.plan._epoch_plan`. A store that records
``piles_shuffled`` (:data:`~daskshuffle.plan._plan.PILES_SHUFFLED`) holds its
rows, end to end, in a uniform random permutation of the source's: the pile
assignment is uniform given the pile sizes, and each pile is stored in a
uniform order drawn from the seed. The loader then reads *units*, runs of
``unit_rows`` store rows that a read takes cheaply (whole chunks), and:

- deals the units into groups of about ``group_rows`` rows, afresh every epoch
  (:func:`unit_groups`, from ``(seed, "unit-groups", epoch)``): a group is
  what the loader holds and mixes at once, its place in the epoch's order;
- shuffles each unit of a group on its own (small enough to stay in cache),
  then interleaves the group's units uniformly (:func:`group_mix`, from
  ``(seed, "unit-mix", epoch, group)``): a row of the interleaving is the
  next row of a unit drawn with probability proportional to the rows it has
  left, so a batch takes a few contiguous runs of each shuffled unit.

Within an epoch the order is exactly uniform: it is a permutation of store
positions drawn independently of the store's own permutation, and a uniform
permutation composed with an independent one is uniform. Across epochs, two
rows that share a batch share a unit with probability about ``1/k`` (``k``
units a group), and rows of one unit stay in one group: they meet again in a
batch about ``n_units / k**2 + 1`` times as often as under independent
shuffles (:func:`unit_excess`), ``data * unit / group**2`` in bytes.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .._random import make_rng
from ._epoch_plan import cobatch_excess

__all__ = ["group_mix", "unit_bounds", "unit_excess", "unit_groups", "unit_rows_for"]

IntArray = NDArray[np.int64]

#: Bytes a read of a unit may take per byte of rows, at most, where a variable's chunks hold more rows than a unit.
READ_OVERHEAD = 1.25


def unit_rows_for(chunk_rows: dict[str, int], row_nbytes: dict[str, int], overhead: float = READ_OVERHEAD) -> int:
    """The rows of a unit: the fewest chunk rows whose reads cost at most ``overhead`` times the rows' bytes.

    A unit of ``u`` rows reads whole chunks: ``max(c, u) / u`` times a
    variable's bytes for chunks of ``c`` rows. Chunk rows divide each other
    (the layout's rule), so every candidate is a whole number of every
    smaller variable's chunks.

    Examples
    --------
    >>> unit_rows_for({"x": 4096, "y": 32768}, {"x": 256, "y": 8})  # y read whole for units of x's chunks: +22%
    4096
    >>> unit_rows_for({"x": 4096, "y": 32768}, {"x": 16, "y": 8})
    32768
    """
    total = float(sum(row_nbytes.values())) or 1.0
    for rows in sorted(set(chunk_rows.values())):
        read = sum(row_nbytes[name] * max(chunks, rows) / rows for name, chunks in chunk_rows.items())
        if read <= overhead * total:
            return int(rows)
    return int(max(chunk_rows.values()))


def unit_bounds(n_rows: int, unit_rows: int) -> IntArray:
    """Where each unit of a store of ``n_rows`` rows starts, and the end: every ``unit_rows`` rows.

    Examples
    --------
    >>> unit_bounds(10, 4).tolist()
    [0, 4, 8, 10]
    """
    return np.unique(np.append(np.arange(0, n_rows, max(1, unit_rows), dtype=np.int64), n_rows)).astype(np.int64)


def unit_groups(bounds: IntArray, group_rows: int, seed: int, epoch: int) -> tuple[IntArray, list[IntArray]]:
    """The groups of units that ``epoch`` reads and mixes: the groups' offsets end to end, and each group's units.

    The units are dealt in an order drawn from ``(seed, "unit-groups",
    epoch)``, each group taking units while it holds at most ``group_rows``
    rows (one at least), so that groups differ from epoch to epoch. A
    group's units are in that drawn order; the groups are read in order.

    Examples
    --------
    >>> offsets, groups = unit_groups(np.array([0, 4, 8, 12, 14]), 8, seed=0, epoch=0)
    >>> offsets.tolist(), sorted(int(u) for group in groups for u in group)
    ([0, 8, 14], [0, 1, 2, 3])
    """
    sizes = np.diff(bounds)
    n_units = len(sizes)
    if n_units == 0:
        return np.zeros(1, dtype=np.int64), []
    order = make_rng(seed, "unit-groups", epoch).permutation(n_units).astype(np.int64)
    dealt = sizes[order]
    groups: list[IntArray] = []
    filled, first = 0, 0
    for index, size in enumerate(dealt.tolist()):
        if index > first and filled + size > group_rows:
            groups.append(order[first:index])
            first, filled = index, 0
        filled += size
    groups.append(order[first:])
    ends = np.cumsum([int(sizes[group].sum()) for group in groups])
    return np.concatenate([[0], ends]).astype(np.int64), groups


def group_mix(sizes: IntArray, seed: int, epoch: int, group: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """How the loader mixes a group of units of ``sizes`` rows, laid end to end: ``(arrange, order)``.

    ``rows[arrange]`` shuffles each unit within its own rows (one uniform
    permutation a unit); ``arranged[order]`` is then a uniform interleaving of
    the shuffled units: each unit's rows in turn, the units in a uniformly
    random sequence of labels. Both are drawn from ``(seed, "unit-mix",
    epoch, group)``. ``rows[arrange[order]]`` is a uniform permutation of the
    group. ``order`` reads each unit front to back, so that a batch takes
    contiguous runs of the arranged rows.

    Examples
    --------
    >>> arrange, order = group_mix(np.array([3, 2]), seed=0, epoch=0, group=0)
    >>> sorted(arrange[:3].tolist()), sorted(arrange[3:].tolist()), sorted(order.tolist())
    ([0, 1, 2], [3, 4], [0, 1, 2, 3, 4])
    >>> [int(p) for p in order if p < 3] == [0, 1, 2]  # each unit read front to back
    True
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n = int(sizes.sum())
    rng = make_rng(seed, "unit-mix", epoch, group)
    starts = np.cumsum(sizes) - sizes
    arrange = np.empty(n, dtype=np.intp)
    for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
        arrange[start : start + size] = rng.permutation(size) + start
    label_type = np.uint16 if len(sizes) <= np.iinfo(np.uint16).max else np.int64
    labels = np.repeat(np.arange(len(sizes), dtype=label_type), sizes)
    rng.shuffle(labels)
    # The t-th row of the interleaving is the next unread row of unit labels[t]: ordered by (unit, t), the rows
    # are the units laid end to end, so the position in that ordering is the row's place in the arranged rows.
    by_unit = np.argsort(labels, kind="stable")
    order = np.empty(n, dtype=np.intp)
    order[by_unit] = np.arange(n, dtype=np.intp)
    return arrange, order


def unit_excess(n_rows: int, unit_rows: int, group_rows: int) -> float:
    """About how much more often than under independent shuffles batch-mates meet again next epoch.

    ``cobatch_excess`` of the units: ``n_units / k**2 + 1`` for ``k`` units a
    group, that is ``n_rows * unit_rows / group_rows**2 + 1``.

    Examples
    --------
    >>> round(unit_excess(4_194_304, 8_192, 262_144), 2)  # 1 GiB of 256 B rows, 2 MiB units, 64 MiB groups
    1.44
    """
    n_units = max(1, -(-n_rows // max(1, unit_rows)))
    per_group = max(1, group_rows // max(1, unit_rows))
    return cobatch_excess(n_units, per_group)
