"""The reads of ``order="piles"``: groups of units of whole chunks, as :mod:`daskshuffle.epochs._unit_plan` plans them.

Units never cross from one store to another (a mixture's stores, an appended store's generations).
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .. import epochs
from .._config import int_setting
from .._machine import memory_nbytes
from ..readers import PileReader
from ._epoch_reads import EpochCache, EpochReads, Read, ReadPlan

__all__ = ["UnitGroups", "UnitSizes", "choose_units"]

IntArray = NDArray[np.int64]


class UnitSizes(NamedTuple):
    """What a loader's budget gives for its store: rows of a group (at most), and of a unit of each member store."""

    group_rows: int
    member_unit_rows: list[int]

    @property
    def unit_rows(self) -> int:
        """Rows of the largest unit: of the store's, where it is one store."""
        return max(self.member_unit_rows)


def choose_units(budget: int | str, reader: PileReader[Any], row_nbytes: float, n_rows: int) -> UnitSizes:
    """The units and groups a loader reads ``reader`` in, for ``budget`` bytes; each member store has its own unit."""
    row = max(row_nbytes, 1.0)
    members = [  # rows a chunk and bytes a row of each variable
        ({name: rows for name, (rows, _) in found.items()}, {name: size for name, (_, size) in found.items()})
        for found in reader.member_chunk_rows()
    ]
    if budget == "auto":
        unit_nbytes = max(epochs.unit_rows_for(*member) for member in members) * row  # the cheapest units to read
        budget = epochs.auto_budget(
            n_rows * row,
            unit_nbytes,
            least=int_setting("loader.units-budget-least-nbytes"),
            most=int_setting("loader.units-budget-most-nbytes"),
            memory=memory_nbytes(),
        )
    return UnitSizes(*epochs.unit_sizes(int(budget), row, members, n_rows))


#: An epoch's groups: their offsets end to end, and the runs of store rows (``(k, 2)``) of each.
Groups = tuple[IntArray, list[IntArray]]


class UnitGroups(EpochReads):
    """A read is a group of units of ``unit_rows`` store rows, dealt afresh each epoch, mixed in memory.

    ``segments``: where the rows lie in the member stores (:attr:`~daskshuffle.readers.PileReader.segments`);
    ``members`` and ``counts``, for a mixture: where each stream's rows start, and its rows per epoch.

    Examples
    --------
    >>> groups = UnitGroups(np.array([0, 6, 10]), seed=0, unit_rows=2, group_rows=4)
    >>> groups.layout(0).tolist()
    [0, 4, 8, 10]
    >>> read = groups.plan_read(Read(0, 0, 0, 4))
    >>> sum(stop - start for start, stop in read.spans), sorted(read.order.tolist())
    (4, [0, 1, 2, 3])
    """

    def __init__(
        self,
        offsets: IntArray,
        seed: int,
        unit_rows: int | list[int],
        group_rows: int,
        segments: IntArray | None = None,
        members: IntArray | None = None,
        counts: list[int] | None = None,
    ) -> None:
        self.offsets = offsets
        self.seed = seed
        self.group_rows = group_rows
        self.bounds = epochs.unit_bounds(int(offsets[-1]), unit_rows, segments)
        self.members = members
        self.counts = counts
        self._groups_made = EpochCache[Groups]()

    def _groups(self, epoch: int) -> Groups:
        return self._groups_made.get(epoch, self._make_groups)

    def _make_groups(self, epoch: int) -> Groups:
        runs = epochs.epoch_runs(self.bounds, self.seed, epoch, self.members, self.counts)
        offsets, groups = epochs.deal_groups(runs[:, 1] - runs[:, 0], self.group_rows, self.seed, epoch)
        return offsets, [runs[group] for group in groups]

    def layout(self, epoch: int) -> IntArray:  # in the order dealt: the deal is random already
        return self._groups(epoch)[0]

    def spans(self, read: Read) -> list[tuple[int, int]]:
        """The runs of store rows of the group ``read`` takes: its units, in the order they were dealt."""
        return [(int(a), int(b)) for a, b in self._groups(read.epoch)[1][read.number].tolist()]

    def plan_read(self, read: Read) -> ReadPlan:
        runs = self.spans(read)
        n_rows = sum(stop - start for start, stop in runs)
        order = epochs.group_permutation(n_rows, self.seed, read.epoch, read.number)
        shared = any(b > c for (_, b), (c, _) in itertools.pairwise(sorted(runs)))  # two runs share a row
        if self.counts is not None and shared:  # a mixture's copies of a unit: never side by side
            rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in runs])
            order = epochs.apart(rows, order, self.seed, read.epoch, read.number)
        return ReadPlan(runs, order[read.start : read.stop])

    def piles_of(self, epoch: int, index: int) -> list[int]:
        """The store piles that the runs of group ``index`` of ``epoch`` hold rows of, in the order of the store."""
        runs = self._groups(epoch)[1][index].reshape(-1, 2)
        first = np.searchsorted(self.offsets, runs[:, 0], side="right") - 1
        last = np.searchsorted(self.offsets, runs[:, 1] - 1, side="right") - 1
        spans = [np.arange(a, b + 1) for a, b in zip(first.tolist(), last.tolist(), strict=True)]
        piles = np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)
        return np.unique(piles).astype(int).tolist()  # type: ignore[no-any-return]

    def describe(self, read: Read) -> str:
        runs = self.spans(read)
        shown = ", ".join(f"{a}:{b}" for a, b in runs[:3]) + (", ..." if len(runs) > 3 else "")
        return f"group {read.number} of {len(runs)} units of store rows ({shown})"
