"""How a loader cuts each epoch into read units: one :class:`ReadUnits` per way, behind one small interface.

A *read unit* is what one read holds at once: a pile (:class:`PileUnits`), a
group of piles dealt afresh each epoch (:class:`GroupUnits`), a unit of the
stream of an order of :data:`~daskshuffle.plan._orders.ORDERS`
(:class:`~daskshuffle.loader._order_units.OrderedUnits`), or a copy of a pile
of a mixture (:class:`~daskshuffle.loader._mix.MixedUnits`). The loader's plan
cuts the units of an epoch (:meth:`ReadUnits.layout`, visited in
:meth:`ReadUnits.visit_order`) between ranks and batches, and each read asks
its unit for what to read and in which order to hand its positions out
(:meth:`ReadUnits.unit_read`): the rest of the loader never asks which kind
of units it reads.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..plan import epoch_pile_order, grouped_offsets, pile_groups, pile_permutation

__all__ = ["GroupUnits", "PileUnits", "Read", "ReadUnits", "UnitRead", "pile_units"]

IntArray = NDArray[np.int64]


class Read(NamedTuple):
    """Positions ``start:stop`` of ``pile`` (a read unit) once shuffled for ``epoch``: one read."""

    epoch: int
    pile: int
    start: int
    stop: int


class UnitRead(NamedTuple):
    """What one read takes from the store, and the order to hand its positions out in.

    ``spans`` are the runs of store rows read, one after the other, each with
    one call to the reader; ``piles`` the store piles they are, when the units
    read whole piles (:attr:`ReadUnits.whole_piles`); ``order`` indexes the
    rows read, end to end.
    """

    spans: list[tuple[int, int]]
    piles: list[int]
    order: NDArray[np.intp]


#: Epochs whose groups are kept: the one being read, the next one read ahead, and a range's.
KEPT_EPOCHS = 4
Groups = tuple[IntArray, list[IntArray]]


class EpochGroups:
    """The groups of each epoch, made once and shared by threads; the last :data:`KEPT_EPOCHS` kept, pickled empty."""

    def __init__(self) -> None:
        self._made: dict[int, Groups] = {}
        self._lock = threading.Lock()

    def get(self, epoch: int, make: Callable[[int], Groups]) -> Groups:
        with self._lock:
            found = self._made.get(epoch)
            if found is None:
                found = make(epoch)
                if len(self._made) >= KEPT_EPOCHS:
                    self._made.pop(next(iter(self._made)))
                self._made[epoch] = found
            return found

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


class ReadUnits(ABC):
    """The read units of every epoch of a loader: where they are, in which order they are read, what each reads.

    Implementations are pure functions of the store's pile offsets, the seed
    and the epoch (and of how the loader cuts the stream between ranks), so
    that every rank and every worker process agrees on them.
    """

    #: Whether a unit is whole store piles, read with the reader's ``read_pile`` (and, for one pile, its
    #: shared read), rather than runs of store rows.
    whole_piles: ClassVar[bool] = False
    #: Whether the loader reads these units in background threads for every consumer, a fast one too, rather
    #: than only for one away with each batch (see :mod:`daskshuffle.loader._prefetch`).
    background: ClassVar[bool] = False

    @abstractmethod
    def layout(self, epoch: int) -> IntArray:
        """The offsets of ``epoch``'s units: unit ``u`` holds positions ``layout[u]:layout[u + 1]``."""

    @abstractmethod
    def visit_order(self, epoch: int) -> NDArray[np.intp]:
        """The order ``epoch`` reads its units in: the epoch's stream is these units end to end."""

    @abstractmethod
    def unit_read(self, read: Read) -> UnitRead:
        """What ``read`` takes from the store, and the order of its positions."""

    @abstractmethod
    def piles_of(self, epoch: int, unit: int) -> list[int]:
        """The store piles ``unit`` of ``epoch`` reads rows of."""

    @abstractmethod
    def describe(self, read: Read) -> str:
        """What ``read`` reads, for an error's note: ``"pile 3 (rows 300:400)"``."""

    def spans(self, read: Read) -> list[tuple[int, int]]:
        """The runs of store rows that ``read`` reads, each with one call to the reader."""
        return self.unit_read(read).spans


class PileUnits(ReadUnits):
    """A unit is a pile: the piles in a random order each epoch, each shuffled whole.

    Examples
    --------
    >>> units = PileUnits(np.array([0, 4, 6, 10]), seed=0)
    >>> sorted(units.visit_order(0).tolist()), units.unit_read(Read(0, 1, 0, 2)).spans
    ([0, 1, 2], [(4, 6)])
    """

    whole_piles = True

    def __init__(self, offsets: IntArray, seed: int) -> None:
        self.offsets = offsets
        self.seed = seed

    def layout(self, epoch: int) -> IntArray:
        return self.offsets

    def visit_order(self, epoch: int) -> NDArray[np.intp]:
        return epoch_pile_order(self.seed, epoch, len(self.layout(epoch)) - 1)

    def members(self, epoch: int, unit: int) -> list[int]:
        """The store piles of ``unit`` of ``epoch``, read one after the other."""
        return [unit]

    def unit_read(self, read: Read) -> UnitRead:
        offsets = self.layout(read.epoch)
        size = int(offsets[read.pile + 1] - offsets[read.pile])
        order = pile_permutation(self.seed, read.epoch, read.pile, size)[read.start : read.stop]
        return UnitRead(self.spans(read), self.members(read.epoch, read.pile), order)

    def spans(self, read: Read) -> list[tuple[int, int]]:
        # Without the unit's shuffle: the reads ahead ask for the spans of every read they start.
        return [(int(self.offsets[p]), int(self.offsets[p + 1])) for p in self.members(read.epoch, read.pile)]

    def piles_of(self, epoch: int, unit: int) -> list[int]:
        return self.members(epoch, unit)

    def describe(self, read: Read) -> str:
        return f"pile {read.pile} (rows {int(self.offsets[read.pile])}:{int(self.offsets[read.pile + 1])})"


class GroupUnits(PileUnits):
    """A unit is a group of ``piles_in_memory`` piles, dealt afresh each epoch, read and shuffled as one pile.

    Examples
    --------
    >>> units = GroupUnits(np.array([0, 4, 6, 10]), seed=1, piles_in_memory=2)
    >>> [units.piles_of(0, group) for group in range(2)], units.layout(0).tolist()
    ([[0, 2], [1]], [0, 8, 10])
    """

    def __init__(self, offsets: IntArray, seed: int, piles_in_memory: int) -> None:
        super().__init__(offsets, seed)
        self.piles_in_memory = piles_in_memory
        self._groups_made = EpochGroups()

    def _groups(self, epoch: int) -> Groups:
        """The offsets of ``epoch``'s groups laid end to end, and the store piles of each, made once."""
        return self._groups_made.get(epoch, self._make_groups)

    def _make_groups(self, epoch: int) -> Groups:
        groups = pile_groups(len(self.offsets) - 1, self.piles_in_memory, self.seed, epoch)
        assert groups is not None  # pile_units makes groups of more than one of several piles only
        return grouped_offsets(self.offsets, groups), groups

    def layout(self, epoch: int) -> IntArray:
        return self._groups(epoch)[0]

    def members(self, epoch: int, unit: int) -> list[int]:
        return [int(pile) for pile in self._groups(epoch)[1][unit]]

    def describe(self, read: Read) -> str:
        offsets = self.layout(read.epoch)
        size = int(offsets[read.pile + 1] - offsets[read.pile])
        return f"piles {self.members(read.epoch, read.pile)} (a group of {size} rows)"


def pile_units(offsets: IntArray, seed: int, piles_in_memory: int) -> PileUnits:
    """The units of ``order="piles"``: piles alone, or groups of ``piles_in_memory`` of them.

    Examples
    --------
    >>> type(pile_units(np.array([0, 4, 6, 10]), 0, 1)).__name__, type(pile_units(np.array([0, 4, 6, 10]), 0, 2)).__name__
    ('PileUnits', 'GroupUnits')
    """
    if piles_in_memory <= 1 or len(offsets) <= 2:
        return PileUnits(offsets, seed)
    return GroupUnits(offsets, seed, piles_in_memory)
