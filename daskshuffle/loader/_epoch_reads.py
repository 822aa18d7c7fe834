"""How a loader cuts each epoch into reads, behind one small interface (:class:`EpochReads`).

A read is what the loader holds at once: for ``order="piles"`` a group of units,
for every other order a stretch of its stream.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

from .._threads import PickledEmpty

__all__ = ["EpochCache", "EpochReads", "Read", "ReadPlan"]

IntArray = NDArray[np.int64]
Made = TypeVar("Made")


class Read(NamedTuple):
    """Positions ``start:stop`` of read ``number`` of ``epoch``, once shuffled: what one read hands out."""

    epoch: int
    number: int
    start: int
    stop: int


class ReadPlan(NamedTuple):
    """The runs of store rows one read takes, one after the other, and the order of the rows read, end to end."""

    spans: list[tuple[int, int]]
    order: NDArray[np.intp]


#: Epochs whose reads are kept: the one being read, the next one read ahead, and a range's.
KEPT_EPOCHS = 3


class EpochCache(PickledEmpty, Generic[Made]):
    """What is made once for each epoch and shared by threads; the last :data:`KEPT_EPOCHS` kept.

    An error reaches the threads waiting, and the next to ask tries again.
    """

    def __init__(self) -> None:
        self._made: dict[int, Future[Made]] = {}
        self._lock = threading.Lock()

    def get(self, epoch: int, make: Callable[[int], Made]) -> Made:
        with self._lock:
            pending = self._made.get(epoch)
            making = pending is None
            if pending is None:
                if len(self._made) >= KEPT_EPOCHS:
                    self._made.pop(next(iter(self._made)))  # a thread still making it keeps its own future
                pending = self._made[epoch] = Future()
        if making:
            try:
                pending.set_result(make(epoch))
            except BaseException as error:
                with self._lock:
                    if self._made.get(epoch) is pending:
                        del self._made[epoch]
                pending.set_exception(error)
                raise
        return pending.result()


class EpochReads(ABC):
    """The reads of every epoch: pure functions of the store's layout, the seed and the epoch (ranks agree)."""

    @abstractmethod
    def layout(self, epoch: int) -> IntArray:
        """The offsets of ``epoch``'s reads, in the order they are read: read ``r`` holds ``layout[r]:layout[r + 1]``."""

    @abstractmethod
    def plan_read(self, read: Read) -> ReadPlan:
        """What ``read`` takes from the store, and the order of its positions."""

    @abstractmethod
    def piles_of(self, epoch: int, index: int) -> list[int]:
        """The store piles read ``index`` of ``epoch`` takes rows of."""

    @abstractmethod
    def describe(self, read: Read) -> str:
        """What ``read`` takes, for an error's note: ``"group 3 of 12 units of store rows (...)"``."""

    def spans(self, read: Read) -> list[tuple[int, int]]:
        """The runs of store rows that ``read`` takes, each with one call to the reader."""
        return self.plan_read(read).spans
