"""The loader's one read mode: units of whole chunks, dealt into groups under a budget, each group mixed.

A store holds its rows in a uniform random permutation (uniform pile assignment, each pile stored
shuffled), so a unit (a run of ``unit_rows`` store rows) is a uniform sample. Each epoch deals the
units afresh into groups (:func:`deal_groups`) and hands a group's rows out in one uniform
permutation (:func:`group_permutation`), which is what shuffling each unit and interleaving them
uniformly gives, for less work. The epoch is exactly uniform; across epochs batch-mates meet again
about ``n_units / k**2 + 1`` times as often as under independent shuffles (:func:`unit_excess`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from .._random import make_rng
from ._epoch_plan import IntArray

__all__ = [
    "apart",
    "auto_budget",
    "deal_groups",
    "epoch_runs",
    "group_permutation",
    "unit_bounds",
    "unit_excess",
    "unit_rows_for",
    "unit_sizes",
]

#: Bytes a read of a unit may take per byte of rows, at most, where a variable's chunks hold more rows than a unit.
READ_OVERHEAD = 1.25
#: How much more often than under independent shuffles batch-mates may meet again next epoch for a larger unit.
EXCESS_WITHIN = 1.25
#: The excess the automatic budget aims for: groups of ``sqrt(data * unit / (AUTO_EXCESS - 1))`` bytes.
AUTO_EXCESS = 2.0
#: The share of the process's memory the automatic budget takes at most (beyond its least).
MEMORY_SHARE = 1 / 16


def auto_budget(data_nbytes: float, unit_nbytes: float, least: int, most: int, memory: int | None = None) -> int:
    """The bytes of rows the default loader holds (two groups), for an excess of about :data:`AUTO_EXCESS`.

    A group of ``sqrt(data * unit)`` bytes keeps :func:`unit_excess` near 2; the budget is two
    such groups, clipped to ``[least, most]`` and to :data:`MEMORY_SHARE` of ``memory`` (not below ``least``).

    Examples
    --------
    >>> MiB, GiB, TiB = 2**20, 2**30, 2**40
    >>> auto_budget(1 * GiB, 1 * MiB, least=128 * MiB, most=4 * GiB) // MiB  # small data: the least
    128
    >>> auto_budget(1 * TiB, 1 * MiB, least=128 * MiB, most=4 * GiB) // MiB  # two groups of 1 GiB: 2x
    2048
    >>> auto_budget(1 * TiB, 1 * MiB, least=128 * MiB, most=4 * GiB, memory=16 * GiB) // MiB  # a 16th of memory
    1024
    """
    wanted = 2 * math.sqrt(max(data_nbytes, 0.0) * max(unit_nbytes, 0.0) / (AUTO_EXCESS - 1))
    ceiling = float(most) if memory is None else min(float(most), memory * MEMORY_SHARE)
    return int(max(least, min(wanted, ceiling)))


def unit_rows_for(
    chunk_rows: dict[str, int], row_nbytes: dict[str, int], *, n_rows: int | None = None, group_rows: int | None = None
) -> int:
    """The rows of a unit: the fewest chunk rows whose reads cost at most :data:`READ_OVERHEAD` times the rows' bytes.

    A unit of ``u`` rows reads ``max(c, u) / u`` times the bytes of a variable in chunks of ``c``
    rows. Given ``n_rows`` and ``group_rows``, the unit then doubles, up to the largest chunk rows,
    while :func:`unit_excess` stays within :data:`EXCESS_WITHIN`: a chunk shared by several units is
    decoded whole by each.

    Examples
    --------
    >>> unit_rows_for({"x": 4096, "y": 32768}, {"x": 256, "y": 8})  # y read whole for units of x's chunks: +22%
    4096
    >>> unit_rows_for({"x": 4096, "y": 32768}, {"x": 16, "y": 8})
    32768
    >>> unit_rows_for({"x": 1024, "y": 8192}, {"x": 256, "y": 8}, n_rows=4_000_000, group_rows=250_000)
    4096
    """
    total = float(sum(row_nbytes.values())) or 1.0
    largest = int(max(chunk_rows.values()))
    chosen = largest
    for rows in sorted(set(chunk_rows.values())):
        read = sum(row_nbytes[name] * max(chunks, rows) / rows for name, chunks in chunk_rows.items())
        if read <= READ_OVERHEAD * total:
            chosen = int(rows)
            break
    if n_rows is None or group_rows is None:
        return chosen
    while chosen * 2 <= largest and unit_excess(n_rows, chosen * 2, group_rows) <= EXCESS_WITHIN:
        chosen *= 2
    return chosen


def unit_sizes(
    budget: int, row_nbytes: float, members: Sequence[tuple[dict[str, int], dict[str, int]]], n_rows: int
) -> tuple[int, list[int]]:
    """Rows of a group, and of a unit of each member store, for a loader that holds ``budget`` bytes of rows.

    A group holds half the budget (the next is read meanwhile) and at least one unit; each member
    store is ``(chunk_rows, row_nbytes)`` for :func:`unit_rows_for`.

    Examples
    --------
    >>> unit_sizes(1000, row_nbytes=1, members=[({"x": 100}, {"x": 1}), ({"x": 50}, {"x": 1})], n_rows=800)
    (500, [100, 50])
    """
    group_rows = int(int(budget) // 2 // max(row_nbytes, 1.0))
    units = [unit_rows_for(*member, n_rows=n_rows, group_rows=group_rows) for member in members]
    units = [max(1, min(unit, max(n_rows, 1))) for unit in units]
    return max(max(units), group_rows), units


def unit_bounds(n_rows: int, unit_rows: int | Sequence[int], segments: IntArray | None = None) -> IntArray:
    """Where each unit of ``n_rows`` rows starts, and the end: every ``unit_rows`` rows of each segment's store.

    ``segments`` (``(n, 4)``: start, start in its member store, rows, member) place the rows of
    several member stores read as one; a unit never crosses a segment and is cut at its member's
    chunks, every ``unit_rows[member]`` rows. By default one segment, the store itself.

    Examples
    --------
    >>> unit_bounds(10, 4).tolist()
    [0, 4, 8, 10]
    >>> unit_bounds(10, [4, 2], np.array([[0, 0, 6, 0], [6, 3, 4, 1]])).tolist()  # 4 rows from row 3 of a second store
    [0, 4, 6, 7, 9, 10]
    """
    steps = [max(1, int(rows)) for rows in np.atleast_1d(np.asarray(unit_rows)).tolist()]
    if segments is None:
        segments = np.array([[0, 0, n_rows, 0]], dtype=np.int64)
    cuts = [np.array([n_rows], dtype=np.int64)]
    for start, first, length, member in np.asarray(segments, dtype=np.int64).reshape(-1, 4).tolist():
        step = steps[member]
        inside = np.arange(-(-first // step) * step, first + length, step, dtype=np.int64)
        cuts.append(np.append(start, inside[inside > first] - first + start).astype(np.int64))
    return np.unique(np.concatenate(cuts)).astype(np.int64)


def epoch_runs(
    bounds: IntArray,
    seed: int,
    epoch: int,
    members: IntArray | None = None,
    counts: Sequence[int] | None = None,
) -> IntArray:
    """``(n, 2)``: the runs of rows (start, stop) that ``epoch`` reads, a unit (or part of one) each.

    Without ``members``, every unit once. With ``members`` (each member's first row, and the end)
    and ``counts`` (its rows in the epoch, :func:`~daskshuffle.epochs._streams.epoch_counts`), a member
    of ``n`` rows gives ``count // n`` copies of each unit, then units drawn for the ``count % n``
    rows left, the last one in part, from a random place on (wrapping round).

    Examples
    --------
    >>> bounds = np.array([0, 4, 8, 10, 14])
    >>> epoch_runs(bounds, 0, 0).tolist()
    [[0, 4], [4, 8], [8, 10], [10, 14]]
    >>> runs = epoch_runs(bounds, 0, 0, members=np.array([0, 10, 14]), counts=[5, 8])
    >>> int((runs[:, 1] - runs[:, 0]).sum()), sorted(runs[:, 0].tolist()).count(10)
    (13, 2)
    """
    units = np.stack([bounds[:-1], bounds[1:]], axis=1).astype(np.int64)
    if members is None or counts is None:
        return units
    runs = [np.zeros((0, 2), dtype=np.int64)]
    for member, count in enumerate(counts):
        a, b = int(members[member]), int(members[member + 1])
        own = units[(units[:, 0] >= a) & (units[:, 1] <= b)]
        if b <= a or count <= 0:
            continue
        copies, left = divmod(int(count), b - a)
        runs.extend([own] * copies)
        if left:
            rng = make_rng(seed, "unit-choose", epoch, member)
            drawn = own[rng.permutation(len(own))]
            ends = np.cumsum(drawn[:, 1] - drawn[:, 0])
            taken = int(np.searchsorted(ends, left))  # the unit that reaches the rows left: a part of it
            runs.append(drawn[:taken])
            runs.append(_part(drawn[taken], left - int(ends[taken - 1] if taken else 0), rng))
    return np.concatenate(runs).astype(np.int64)


def _part(unit: IntArray, n_rows: int, rng: np.random.Generator) -> IntArray:
    """``n_rows`` rows of the run ``unit`` from a random place on, wrapping round: one run or two."""
    start, stop = int(unit[0]), int(unit[1])
    first = start + int(rng.integers(stop - start))
    end = first + n_rows
    if end <= stop:
        return np.array([[first, end]], dtype=np.int64)
    return np.array([[first, stop], [start, start + end - stop]], dtype=np.int64)


def apart(rows: IntArray, order: NDArray[np.intp], seed: int, epoch: int, group: int) -> NDArray[np.intp]:
    """``order`` with no two copies of a row (``rows[order]``) side by side, moving as few as it can.

    A group of a mixture may hold two copies of a unit; a copy next to another is swapped with a
    randomly drawn place where it meets none.

    Examples
    --------
    >>> apart(np.array([5, 5, 6, 7]), np.array([0, 1, 2, 3]), 0, 0, 0).tolist() in ([0, 2, 1, 3], [0, 3, 2, 1], [2, 0, 3, 1])
    True
    """
    order = np.array(order, dtype=np.intp)
    yielded = rows[order]
    side = np.flatnonzero(yielded[1:] == yielded[:-1]) + 1
    if not len(side):
        return order
    rng = make_rng(seed, "unit-apart", epoch, group)
    n = len(order)

    def fits(at: int, row: int) -> bool:
        return (at == 0 or yielded[at - 1] != row) and (at == n - 1 or yielded[at + 1] != row)

    for at in side.tolist():
        if not (at and yielded[at] == yielded[at - 1]):
            continue  # put apart by an earlier swap
        for other in rng.permutation(n).tolist():
            a, b = yielded[at], yielded[other]
            yielded[at], yielded[other] = b, a
            if fits(at, b) and fits(other, a):
                order[at], order[other] = order[other], order[at]
                break
            yielded[at], yielded[other] = a, b
    return order


def deal_groups(sizes: IntArray, group_rows: int, seed: int, epoch: int) -> tuple[IntArray, list[IntArray]]:
    """The groups of runs that ``epoch`` reads and mixes: the groups' offsets end to end, and each group's runs.

    The runs (of ``sizes`` rows) are dealt in a random order, each group taking runs while it holds
    at most ``group_rows`` rows (one at least).

    Examples
    --------
    >>> offsets, groups = deal_groups(np.array([4, 4, 4, 2]), 8, seed=0, epoch=0)
    >>> offsets.tolist(), sorted(int(u) for group in groups for u in group)
    ([0, 8, 14], [0, 1, 2, 3])
    """
    sizes = np.asarray(sizes, dtype=np.int64)
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


def group_permutation(n_rows: int, seed: int, epoch: int, group: int) -> NDArray[np.intp]:
    """The order a loader hands out the ``n_rows`` rows of ``group`` of ``epoch`` in (its units laid end to end).

    Examples
    --------
    >>> sorted(group_permutation(5, seed=0, epoch=0, group=0).tolist())
    [0, 1, 2, 3, 4]
    >>> bool((group_permutation(5, 0, 0, 0) == group_permutation(5, 0, 0, 0)).all())  # same seed, same order
    True
    """
    return make_rng(seed, "unit-mix", epoch, group).permutation(n_rows).astype(np.intp, copy=False)


def unit_excess(n_rows: int, unit_rows: int, group_rows: int) -> float:
    """About how much more often than under independent shuffles batch-mates meet again next epoch.

    Units dealt afresh each epoch into groups of ``k`` put batch-mates in one group again with
    probability ``1/k + (1 - 1/k) (k - 1) / (n_units - 1)``: about ``n_units / k**2 + 1`` times the
    chance under independent shuffles, ``n_rows * unit_rows / group_rows**2 + 1``.

    Examples
    --------
    >>> round(unit_excess(4_194_304, 8_192, 262_144), 2)  # 1 GiB of 256 B rows, 2 MiB units, 64 MiB groups
    1.44
    >>> unit_excess(100, 1, 1), round(unit_excess(100, 1, 16), 2), unit_excess(1, 1, 1)
    (100.0, 1.28, 1.0)
    """
    n_units = max(1, -(-n_rows // max(1, unit_rows)))
    k = max(1, min(group_rows // max(1, unit_rows), n_units))
    if n_units <= 1:
        return 1.0
    together = 1 / k + (1 - 1 / k) * (k - 1) / (n_units - 1)
    return together * n_units / k
