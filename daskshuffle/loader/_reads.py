"""One read of a loader: what it reads, through which reader, and the rows it gives, checked and noted."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..readers import PileReader
from ._epoch_reads import EpochReads, Read

if TYPE_CHECKING:
    from ._prefetch import ReadAhead

__all__ = ["LoaderReads", "ReadingNote", "ShuffledPile"]


class ShuffledPile(NamedTuple):
    """A read's rows as stored, as arrays (or ``None``), the order to hand out positions in, its rows and its name."""

    rows: Any
    arrays: dict[str, NDArray[Any]] | None
    order: NDArray[np.intp]
    n_rows: int
    what: str


class ReadingNote(str):
    """The note an error of a pile's read gets: what was read, for which epoch; one per error, however often raised."""


class LoaderReads:
    """Reads the reads of an epoch through a thread-safe :class:`PileReader`."""

    def __init__(
        self,
        reader: PileReader[Any],
        store: str,
        epoch_reads: EpochReads,
        read_ahead: int = 0,
        held_ahead: int | None = None,
        row_nbytes: float = 1.0,
    ) -> None:
        self.reader = reader
        #: Bytes of reads whose requests may be in flight ahead of the consumer, where the reader fetches.
        self.read_ahead = read_ahead if reader.fetches else 0
        #: Rows a read started ahead of the consumer may hold (``None``: any); a larger one waits for the consumer.
        self.held_ahead = None if held_ahead is None else int(held_ahead // max(row_nbytes, 1.0))
        self.store = store
        self.epoch_reads = epoch_reads
        #: How many times :meth:`close` ran: what was begun before the last one starts nothing any more.
        self.closes = 0
        self._users: weakref.WeakSet[ReadAhead] = weakref.WeakSet()
        self._lock = threading.Lock()

    def opened(self, user: ReadAhead) -> None:
        """Close ``user`` when this closes."""
        with self._lock:
            self._users.add(user)

    def close(self) -> None:
        """Stop every read: each pool closed and joined, then the reader's; a later iteration reads again."""
        with self._lock:
            self.closes += 1
            users = list(self._users)
        for user in users:
            user.close()
        self.reader.close()

    def read(self, job: Read) -> ShuffledPile:
        """Do one read: what its plan takes from the store, at once; an error gets a :class:`ReadingNote`."""
        what = f"{self.epoch_reads.describe(job)} of {self.store!r} for epoch {job.epoch}"
        fetched: list[tuple[int, int]] = []
        try:
            plan = self.epoch_reads.plan_read(job)
            if self.reader.fetches:
                # Every request of the read goes out now (a no-op for the reads started ahead).
                fetched = plan.spans
                for start, stop in fetched:
                    self.reader.fetch(start, stop, job)
            rows = self.reader.read_runs(plan.spans)
            n_rows = sum(stop - start for start, stop in plan.spans)
            return ShuffledPile(rows, self.reader.rows.as_arrays(rows), plan.order, n_rows, what)
        except Exception as error:
            if not any(isinstance(note, ReadingNote) for note in getattr(error, "__notes__", ())):
                error.add_note(ReadingNote(f"daskshuffle was reading {what}."))
            raise
        finally:
            for start, stop in fetched:  # the fetches are read: requests still under way stop (a failed read's)
                self.reader.forget(start, stop, job)

    def release(self, pile: ShuffledPile) -> None:
        """``pile`` is used up: its arrays may be read into again, if the reader recycles them."""
        if pile.arrays is not None:
            self.reader.recycle(pile.arrays)
