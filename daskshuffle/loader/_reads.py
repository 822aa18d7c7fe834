"""One read of a loader: what it reads, through which reader, and the rows it gives, checked and noted.

A read is ``(epoch, number, start, stop)``: positions ``start:stop`` of read
``number`` of ``epoch`` (a group of units, an order's stretch) once shuffled.
:class:`LoaderReads` reads the reads of an epoch through a thread-safe
:class:`~daskshuffle.readers.PileReader`; a :class:`PileRead` does one read and
gives a :class:`ShuffledPile`: the rows as stored and the order to hand them
out in. Where reads run, and how far ahead, is :mod:`daskshuffle.loader._prefetch`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..readers import PileReader
from ._epoch_reads import EpochReads, Read, ReadPlan

__all__ = ["LoaderReads", "PileRead", "ReadingNote", "ShuffledPile"]


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


class PileRead:
    """One read: what its plan takes from the store, through the loader's reader, shuffled and noted.

    Calling it asks the read's plan for what to read and in which order
    (:meth:`~daskshuffle.loader._epoch_reads.EpochReads.plan_read`), reads its
    runs of store rows at once and gives a :class:`ShuffledPile`. An error
    gets a note of what was read, for which epoch.
    """

    def __init__(self, piles: LoaderReads, job: Read) -> None:
        self._piles = piles
        self.job = job

    def __call__(self) -> ShuffledPile:
        piles = self._piles
        fetched: list[tuple[int, int]] = []
        try:
            unit = piles.epoch_reads.plan_read(self.job)
            # On a remote store every request of the read goes out now (a no-op for the reads started ahead).
            fetched = piles.fetch(self.job)
            return self._shuffled(piles.read_runs(unit.spans), unit)
        except Exception as error:
            raise self._noted(error) from None
        finally:
            piles.forget(fetched)  # what a failed read left; nothing after one that read it all

    def _shuffled(self, rows: Any, unit: ReadPlan) -> ShuffledPile:
        piles = self._piles
        n_rows = sum(stop - start for start, stop in unit.spans)
        what = f"{piles.epoch_reads.describe(self.job)} of {piles.store!r} for epoch {self.job.epoch}"
        return ShuffledPile(rows, piles.reader.as_arrays(rows), unit.order, n_rows, what)

    def _noted(self, error: Exception) -> Exception:
        if not any(isinstance(note, ReadingNote) for note in getattr(error, "__notes__", ())):
            what = self._piles.epoch_reads.describe(self.job)
            error.add_note(
                ReadingNote(f"daskshuffle was reading {what} of {self._piles.store!r} for epoch {self.job.epoch}.")
            )
        return error


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
        self.offsets = reader.pile_offsets
        #: The epochs' reads: groups of units, or an order's stretches.
        self.epoch_reads = epoch_reads

    def spans(self, job: Read) -> list[tuple[int, int]]:
        """The runs of store rows that ``job`` reads, each with one call to the reader."""
        return self.epoch_reads.spans(job)

    def fetch(self, job: Read) -> list[tuple[int, int]]:
        """Start the requests of every read of ``job`` at once, where the reader fetches; the spans started."""
        if not self.reader.fetches:
            return []
        spans = self.spans(job)
        for start, stop in spans:
            self.reader.fetch(start, stop)
        return spans

    def forget(self, spans: list[tuple[int, int]]) -> None:
        """Drop what was fetched for ``spans`` and not read."""
        for start, stop in spans:
            self.reader.forget(start, stop)

    def read_runs(self, runs: list[tuple[int, int]]) -> Any:
        """Store rows ``start:stop`` of each of ``runs``, one after the other."""
        return self.reader.read_runs(runs)

    def job(self, job: Read) -> PileRead:
        return PileRead(self, job)

    def read(self, job: Read) -> ShuffledPile:
        return PileRead(self, job)()

    def release(self, pile: ShuffledPile) -> None:
        """``pile`` is used up: its arrays may be read into again, if the reader recycles them."""
        if pile.arrays is not None:
            self.reader.recycle(pile.arrays)
