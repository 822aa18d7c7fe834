"""Read units smaller than piles: groups of runs of a store whose piles are stored shuffled, mixed in memory.

A store that records ``piles_shuffled`` is, end to end, a uniform permutation
of its source (:mod:`daskshuffle.plan._unit_plan`). :class:`RunUnits` reads it
in *units* of a few whole chunks, deals them into groups afresh every epoch,
and hands each group's rows out in one uniform permutation of the group. The
group is one read (a read unit of
:class:`~daskshuffle.loader._read_units.ReadUnits`), its units read straight
into one set of arrays (:meth:`~daskshuffle.readers.PileReader.read_runs`):
the plan of batches cuts groups between ranks and batches as it cuts piles,
and each batch is gathered from the group as from a pile.

:func:`choose_units` decides, when the loader opens, whether a store is read so
(its piles stored shuffled, a reader that says where its chunks lie, one store,
``order="piles"`` with a budget rather than a number of piles) and with which
unit and group: a store written before piles were stored shuffled is read by
piles, as it always was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._machine import memory_nbytes
from ..plan import PILES_SHUFFLED, auto_budget, group_permutation, unit_bounds, unit_groups, unit_rows_for
from ..readers import PileReader
from ._read_units import EpochGroups, Groups, Read, ReadUnits, UnitRead

__all__ = ["RunUnits", "Units", "choose_units", "stores_shuffled_piles"]

IntArray = NDArray[np.int64]


class Units(NamedTuple):
    """How a loader of a store whose piles are stored shuffled reads it: rows a unit, rows a group (at most)."""

    unit_rows: int
    group_rows: int


def stores_shuffled_piles(metadata: Mapping[str, Any]) -> bool:
    """Whether a store's metadata says each pile is stored in an order drawn from the seed, in one generation.

    A store of several generations (``append``) is read by piles: its piles
    hold the rows of each generation after those of the one before.

    Examples
    --------
    >>> stores_shuffled_piles({"piles_shuffled": True}), stores_shuffled_piles({"n_piles": 4})
    (True, False)
    """
    return metadata.get(PILES_SHUFFLED) is True and "generations" not in metadata


def choose_units(
    piles_in_memory: object, budget: int, reader: PileReader[Any], row_nbytes: float, *, several_streams: bool
) -> Units | None:
    """The units and groups a loader reads ``reader`` in, or ``None`` to read it by piles.

    Units are read when the store's piles are stored shuffled, the reader
    says where its chunks lie, there is one store, and the order's
    ``piles_in_memory`` is a budget (``"auto"`` or a size) rather than a
    number of piles. A group holds half the budget (the next one is read
    while one is used), at least one unit. ``"auto"`` grows with the store so
    that batch-mates meet again about twice as often as under independent
    shuffles at most (:func:`~daskshuffle.plan._unit_plan.auto_budget`), from
    ``loader.units-budget-least-nbytes`` (128 MiB) to
    ``loader.units-budget-most-nbytes`` (4 GiB) and a sixteenth of the
    process's memory (``daskshuffle.config``).
    """
    if several_streams or not isinstance(piles_in_memory, str) or not stores_shuffled_piles(reader.metadata):
        return None
    chunks = reader.chunk_rows()
    if not chunks:
        return None
    chunk_rows = {name: rows for name, (rows, _) in chunks.items()}
    nbytes = {name: row for name, (_, row) in chunks.items()}
    if piles_in_memory == "auto":
        unit_nbytes = unit_rows_for(chunk_rows, nbytes) * row_nbytes  # the cheapest unit to read
        budget = auto_budget(
            reader.n_rows * row_nbytes,
            unit_nbytes,
            least=int_setting("loader.units-budget-least-nbytes"),
            most=int_setting("loader.units-budget-most-nbytes"),
            memory=memory_nbytes(),
        )
    group_rows = int(budget // 2 // max(row_nbytes, 1.0))
    unit_rows = unit_rows_for(chunk_rows, nbytes, n_rows=reader.n_rows, group_rows=group_rows)
    unit_rows = max(1, min(unit_rows, reader.n_rows))
    group_rows = max(unit_rows, group_rows)
    return Units(unit_rows, group_rows)


class RunUnits(ReadUnits):
    """A read unit is a group of runs of store rows (units of ``unit_rows``), dealt afresh each epoch, mixed in memory.

    Examples
    --------
    >>> units = RunUnits(np.array([0, 6, 10]), seed=0, unit_rows=2, group_rows=4)
    >>> units.layout(0).tolist()
    [0, 4, 8, 10]
    >>> read = units.unit_read(Read(0, 0, 0, 4))
    >>> sum(stop - start for start, stop in read.spans), sorted(read.order.tolist())
    (4, [0, 1, 2, 3])
    """

    #: A group's read (many chunk files, out of the GIL) overlaps its gather on a second core: measured faster for a
    #: fast consumer, and no slower in all with every core busy (:mod:`daskshuffle.loader._prefetch`).
    background = True

    def __init__(self, offsets: IntArray, seed: int, unit_rows: int, group_rows: int) -> None:
        self.offsets = offsets
        self.seed = seed
        self.unit_rows = unit_rows
        self.group_rows = group_rows
        self.bounds = unit_bounds(int(offsets[-1]), unit_rows)
        self._groups_made = EpochGroups()

    def _groups(self, epoch: int) -> Groups:
        """The offsets of ``epoch``'s groups laid end to end, and the units of each, made once."""
        return self._groups_made.get(epoch, self._make_groups)

    def _make_groups(self, epoch: int) -> Groups:
        return unit_groups(self.bounds, self.group_rows, self.seed, epoch)

    def layout(self, epoch: int) -> IntArray:
        return self._groups(epoch)[0]

    def visit_order(self, epoch: int) -> NDArray[np.intp]:
        """Groups are read in the order they were dealt: the deal is already random."""
        return np.arange(len(self.layout(epoch)) - 1)

    def runs(self, epoch: int, group: int) -> list[tuple[int, int]]:
        """The runs of store rows of ``group`` of ``epoch``: its units, in the order they were dealt."""
        units = self._groups(epoch)[1][group]
        return [(int(self.bounds[u]), int(self.bounds[u + 1])) for u in units.tolist()]

    def spans(self, read: Read) -> list[tuple[int, int]]:
        return self.runs(read.epoch, read.pile)

    def unit_read(self, read: Read) -> UnitRead:
        runs = self.runs(read.epoch, read.pile)
        n_rows = sum(stop - start for start, stop in runs)
        return UnitRead(runs, [], group_permutation(n_rows, self.seed, read.epoch, read.pile)[read.start : read.stop])

    def piles_of(self, epoch: int, unit: int) -> list[int]:
        """The store piles that the runs of group ``unit`` of ``epoch`` hold rows of, in the order of the store."""
        runs = np.asarray(self.runs(epoch, unit), dtype=np.int64).reshape(-1, 2)
        first = np.searchsorted(self.offsets, runs[:, 0], side="right") - 1
        last = np.searchsorted(self.offsets, runs[:, 1] - 1, side="right") - 1
        spans = [np.arange(a, b + 1) for a, b in zip(first.tolist(), last.tolist(), strict=True)]
        piles = np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)
        return np.unique(piles).astype(int).tolist()  # type: ignore[no-any-return]

    def describe(self, read: Read) -> str:
        runs = self.runs(read.epoch, read.pile)
        shown = ", ".join(f"{a}:{b}" for a, b in runs[:3]) + (", ..." if len(runs) > 3 else "")
        return f"group {read.pile} of {len(runs)} runs of store rows ({shown})"
