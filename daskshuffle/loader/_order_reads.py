"""The reads of an order other than ``"piles"``: stretches of an epoch's :class:`~daskshuffle.epochs.EpochOrder`."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..epochs import ORDERS, READ_GAPS, EpochOrder, Order, division_cuts, rank_share, unit_reads
from ..readers import PileReader
from ._epoch_reads import EpochCache, EpochReads, Read, ReadPlan
from ._loader_state import LoaderSettings
from ._mix import Mixture
from ._unit_groups import UnitGroups, UnitSizes

__all__ = ["OrderReads", "make_reads"]


class OrderReads(EpochReads):
    """The epochs' orders of one loader: ``order``, its stream cut between ranks at ``divisions``."""

    def __init__(self, order: Order, offsets: NDArray[np.int64], seed: int, divisions: NDArray[np.int64]) -> None:
        self.order = order
        self.offsets = offsets
        self.seed = seed
        self.divisions = divisions
        self.gap = READ_GAPS[order.name]
        self._epochs = EpochCache[EpochOrder]()

    def epoch_order(self, epoch: int) -> EpochOrder:
        """The order of ``epoch``, made once."""
        return self._epochs.get(epoch, self.draw)

    def draw(self, epoch: int) -> EpochOrder:
        """The order of ``epoch``, made afresh."""
        return ORDERS[self.order.name](self.offsets, self.seed, epoch, self.divisions, self.order)

    def layout(self, epoch: int) -> NDArray[np.int64]:
        return self.epoch_order(epoch).bounds

    def plan_read(self, read: Read) -> ReadPlan:
        return ReadPlan(*unit_reads(self.rows(read.epoch, read.number, read.start, read.stop), self.gap))

    def describe(self, read: Read) -> str:
        return f"stretch {read.number} of the order {self.order.name!r} (positions {read.start}:{read.stop})"

    def rows(self, epoch: int, index: int, start: int, stop: int) -> NDArray[np.int64]:
        """The store rows at positions ``start:stop`` of stretch ``index`` of ``epoch``, in the order they are yielded."""
        order = self.epoch_order(epoch)
        first = int(order.bounds[index])
        return order.rows[first + start : first + stop]

    def piles_of(self, epoch: int, index: int) -> list[int]:
        """The store piles stretch ``index`` of ``epoch`` takes rows of, in the order of the store."""
        rows = self.rows(epoch, index, 0, int(np.diff(self.layout(epoch))[index]))
        piles = np.searchsorted(self.offsets, rows, side="right") - 1
        return np.unique(piles).tolist()  # type: ignore[no-any-return]


def make_reads(
    settings: LoaderSettings, order: Order, reader: PileReader[Any], units: UnitSizes | None, mixture: Mixture | None
) -> EpochReads:
    """A loader's reads of ``reader``: groups of ``units`` (``order="piles"``), or an order's stretches."""
    s, offsets = settings, reader.pile_offsets
    if units is not None:
        members, counts = (None, None) if mixture is None else (mixture.reader.starts, mixture.counts)
        return UnitGroups(offsets, s.seed, units.member_unit_rows, units.group_rows, reader.segments, members, counts)
    n_rows = int(offsets[-1])
    n_divisions, step = s.divisions
    divisions = division_cuts(n_rows, n_divisions, rank_share(n_rows, n_divisions, step, s.drop_last))
    return OrderReads(order, offsets, s.seed, divisions)
