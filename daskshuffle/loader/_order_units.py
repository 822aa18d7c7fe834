"""The units a loader reads for an order other than ``"piles"``: an epoch's :class:`~daskshuffle.plan._epoch_order.EpochOrder`, kept.

For ``order="piles"`` a read is a pile (or a group of piles) and the epoch's
plan is a permutation of the piles, made lazily. Every other order of
:data:`~daskshuffle.plan._orders.ORDERS` gives the epoch's stream of store rows
whole; :class:`OrderedUnits` makes it once per epoch (8 bytes a row, and the
time the order takes: about a second per million rows for ``"buffer"`` and
``"interleave"``), keeps the few epochs a loader is in at once, and tells each
read the store rows of its unit. The plan of batches cuts the units, in order,
exactly as it cuts piles.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..plan import ORDERS, READ_GAP, READ_GAPS, EpochOrder, OrderOptions, division_cuts, rank_share, unit_reads
from ._loader_state import LoaderSettings
from ._read_units import Read, ReadUnits, UnitRead, pile_units
from ._run_units import RunUnits

__all__ = ["OrderedUnits", "loader_divisions", "make_units"]

#: Epochs whose order is kept: the one being read, the next one read ahead, and a range's.
KEPT_EPOCHS = 3


class OrderedUnits(ReadUnits):
    """The epochs' orders of one loader: ``order`` with ``options``, its stream cut between ranks at ``divisions``.

    A unit is a stretch ``bounds[u]:bounds[u + 1]`` of the epoch's stream, read
    in runs of store rows (:func:`~daskshuffle.plan._epoch_order.unit_reads`).
    """

    def __init__(
        self, order: str, options: OrderOptions, offsets: NDArray[np.int64], seed: int, divisions: NDArray[np.int64]
    ) -> None:
        self.order = order
        self.options = options
        self.offsets = offsets
        self.seed = seed
        self.divisions = divisions
        #: Rows a read may take between two rows its unit needs (see :func:`~daskshuffle.plan._epoch_order.unit_reads`).
        self.gap = READ_GAPS.get(order, READ_GAP)
        self._epochs: dict[int, Future[EpochOrder]] = {}
        self._lock = threading.Lock()

    def epoch_order(self, epoch: int) -> EpochOrder:
        """The order of ``epoch``, made once: a thread that asks while another makes it waits for that one."""
        with self._lock:
            pending = self._epochs.get(epoch)
            making = pending is None
            if pending is None:
                if len(self._epochs) >= KEPT_EPOCHS:
                    self._epochs.pop(next(iter(self._epochs)))  # a thread still making it keeps its own future
                pending = self._epochs[epoch] = Future()
        if making:
            try:
                pending.set_result(self.draw(epoch))
            except BaseException as error:
                with self._lock:  # the threads waiting get the error; the next to ask tries again
                    if self._epochs.get(epoch) is pending:
                        del self._epochs[epoch]
                pending.set_exception(error)
                raise
        return pending.result()

    def draw(self, epoch: int) -> EpochOrder:
        """The order of ``epoch``, made afresh."""
        return ORDERS[self.order](self.offsets, self.seed, epoch, self.divisions, self.options)

    def bounds(self, epoch: int) -> NDArray[np.int64]:
        """Where each unit of ``epoch``'s stream starts, and the stream's end: the offsets the plan cuts."""
        return self.epoch_order(epoch).bounds

    def layout(self, epoch: int) -> NDArray[np.int64]:
        return self.bounds(epoch)

    def visit_order(self, epoch: int) -> NDArray[np.intp]:
        """Units are read in the order of the stream."""
        return np.arange(len(self.bounds(epoch)) - 1)

    def unit_read(self, read: Read) -> UnitRead:
        runs, order = unit_reads(self.rows(read.epoch, read.pile, read.start, read.stop), self.gap)
        return UnitRead(runs, [], order)

    def describe(self, read: Read) -> str:
        return f"unit {read.pile} of the order {self.order!r} (positions {read.start}:{read.stop})"

    def rows(self, epoch: int, unit: int, start: int, stop: int) -> NDArray[np.int64]:
        """The store rows at positions ``start:stop`` of ``unit`` of ``epoch``, in the order they are yielded."""
        order = self.epoch_order(epoch)
        first = int(order.bounds[unit])
        return order.rows[first + start : first + stop]

    def piles_of(self, epoch: int, unit: int) -> list[int]:
        """The store piles ``unit`` of ``epoch`` reads rows of, in the order of the store."""
        rows = self.rows(epoch, unit, 0, int(np.diff(self.bounds(epoch))[unit]))
        piles = np.searchsorted(self.offsets, rows, side="right") - 1
        return np.unique(piles).tolist()  # type: ignore[no-any-return]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lock": None, "_epochs": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def make_units(settings: LoaderSettings, offsets: NDArray[np.int64]) -> ReadUnits:
    """The units of a loader of ``settings`` over piles at ``offsets``: piles (or groups of them), or an order's.

    The stream is cut between ranks (or, with ``n_lanes``, between lanes) as
    the loader cuts it: those are the order's divisions, MosaicML's canonical
    nodes.
    """
    s = settings
    if s.order == "piles" and s.unit_rows is not None and s.group_rows is not None:
        return RunUnits(offsets, s.seed, s.unit_rows, s.group_rows)
    if s.order == "piles":
        return pile_units(offsets, s.seed, s.piles_in_memory)
    options = OrderOptions(s.shuffle_block_size, s.buffer_size, s.cycle_length)
    return OrderedUnits(s.order, options, offsets, s.seed, loader_divisions(s, int(offsets[-1])))


def loader_divisions(settings: LoaderSettings, n_rows: int) -> NDArray[np.int64]:
    """Where a loader of ``settings`` cuts an epoch of ``n_rows`` rows between ranks (or lanes), and the tail."""
    s = settings
    if s.n_lanes is None:
        n_divisions, unit = s.world_size, s.batch_size
    else:
        n_divisions, unit = s.n_lanes, s.batch_size * s.world_size // s.n_lanes
    return division_cuts(n_rows, n_divisions, rank_share(n_rows, n_divisions, unit, s.drop_last))
