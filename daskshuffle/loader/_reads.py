"""One read of a loader: what it reads, through which reader, and the rows it gives, checked and noted.

A read is ``(epoch, number, start, stop)``: positions ``start:stop`` of read
``number`` of ``epoch`` (a group of units, an order's stretch) once shuffled.
:class:`LoaderReads` reads the reads of an epoch through a thread-safe
:class:`~daskshuffle.readers.PileReader`, each giving a :class:`ShuffledPile`:
the rows as stored and the order to hand them out in. Where reads run, and how far ahead, is :mod:`daskshuffle.loader._prefetch`.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from ..readers import PileReader
from ._epoch_reads import EpochReads, Read

__all__ = ["LoaderReads", "ReadingNote", "ShuffledPile"]


class _Closes(Protocol):
    def close(self) -> None: ...


class ShuffledPile(NamedTuple):
    """A pile's rows as stored, the same rows as arrays (or ``None``), and the order to hand out positions in.

    ``n_rows`` is how many rows the read's spans hold, what every variable
    must hold; ``what`` names the read in errors.
    """

    rows: Any
    arrays: dict[str, NDArray[Any]] | None
    order: NDArray[np.intp]
    n_rows: int
    what: str


class ReadingNote(str):
    """The note an error of a pile's read gets: what was read, for which epoch; one per error, however often raised."""


class LoaderReads:
    """Reads the reads of an epoch (:class:`~daskshuffle.loader._epoch_reads.EpochReads`) through a thread-safe :class:`PileReader`."""

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
        #: The epochs' reads: groups of units, or an order's stretches.
        self.epoch_reads = epoch_reads
        #: How many times :meth:`close` ran: what was begun before the last one starts nothing any more.
        self.closes = 0
        self._users: weakref.WeakSet[_Closes] = weakref.WeakSet()
        self._lock = threading.Lock()

    def opened(self, user: _Closes) -> None:
        """Close ``user`` (a pool of reads, :class:`~daskshuffle.loader._prefetch.ReadAhead`) when this closes.

        ``user`` serves an iteration begun when :attr:`closes` had some value:
        once it differs, ``user`` starts nothing more.
        """
        with self._lock:
            self._users.add(user)

    def close(self) -> None:
        """Stop every read of the loader's: each user's pool closed and joined, then the reader's fetches.

        An iteration begun before sees :attr:`closes` changed and starts
        nothing more; a later one reads again.
        """
        with self._lock:
            self.closes += 1
            users = list(self._users)
        for user in users:
            user.close()
        self.reader.close()

    def read(self, job: Read) -> ShuffledPile:
        """Do one read: what its plan takes from the store, at once, and the order to hand it out in.

        An error gets a :class:`ReadingNote` of what was read, for which epoch.
        """
        what = f"{self.epoch_reads.describe(job)} of {self.store!r} for epoch {job.epoch}"
        fetched: list[tuple[int, int]] = []
        try:
            plan = self.epoch_reads.plan_read(job)
            if self.reader.fetches:
                # Every request of the read goes out now (a no-op for the reads started ahead).
                fetched = plan.spans
                for start, stop in fetched:
                    self.reader.fetch(start, stop)
            rows = self.reader.read_runs(plan.spans)
            n_rows = sum(stop - start for start, stop in plan.spans)
            return ShuffledPile(rows, self.reader.as_arrays(rows), plan.order, n_rows, what)
        except Exception as error:
            if not any(isinstance(note, ReadingNote) for note in getattr(error, "__notes__", ())):
                error.add_note(ReadingNote(f"daskshuffle was reading {what}."))
            raise
        finally:
            for start, stop in fetched:  # what a failed read left; nothing after one that read it all
                self.reader.forget(start, stop)

    def release(self, pile: ShuffledPile) -> None:
        """``pile`` is used up: its arrays may be read into again, if the reader recycles them."""
        if pile.arrays is not None:
            self.reader.recycle(pile.arrays)
