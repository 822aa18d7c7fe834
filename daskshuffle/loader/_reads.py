"""One read of a loader: what it reads, through which reader, and the rows it gives, checked and noted.

A read is ``(epoch, pile, start, stop)``: positions ``start:stop`` of a read
unit (a pile, a group of piles or of units, an order's unit) once shuffled for
``epoch``. :class:`LoaderReads` reads the units of an epoch through a
thread-safe :class:`~daskshuffle.readers.PileReader`; a :class:`PileRead` does
one read, in steps that the consumer and a background thread share, and gives
a :class:`ShuffledPile`: the rows as stored and the order to hand them out in.
Where reads run, and how far ahead, is :mod:`daskshuffle.loader._prefetch`.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..readers import PileReader
from ._epoch_reads import EpochReads, Read, ReadPlan
from ._unit_groups import UnitGroups

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
    """One read, in steps that the consumer and a background thread share.

    :meth:`start` asks the read's unit what to read and in which order
    (:meth:`~daskshuffle.loader._read_units.ReadUnits.unit_read`) and, for a
    unit that is one whole pile, plans the read of the pile's chunk files (a
    reader with ``start_pile``, see
    :meth:`~daskshuffle.readers._zarr_reader.ZarrPileReader.start_pile`);
    calling the job reads them (in a background thread, only while the
    consumer is away) and gives the pile.
    :meth:`finish` is the consumer's way to the pile: it reads what no thread
    has taken yet and waits only for the files under way, rather than for a
    background thread to wake up.
    """

    def __init__(self, piles: LoaderReads, job: Read) -> None:
        self._piles = piles
        self.job = job
        self._unit: ReadPlan | None = None
        self._read: Any = None  # the reader's read under way (a RowsRead), once started

    def start(self) -> None:
        piles = self._piles
        try:
            if self._unit is None:
                self._unit = piles.units.plan_read(self.job)
        except Exception as error:
            raise self._noted(error) from None

    def __call__(self, away: threading.Event | None = None) -> ShuffledPile:
        """Read the pile; with ``away``, take each chunk task only while ``away`` is set."""
        self.start()
        read, unit = self._read, self._unit
        assert unit is not None  # start() made it
        fetched: list[tuple[int, int]] = []
        try:
            if read is not None:
                if away is not None:
                    while away.wait() and read.help(1):
                        pass
                rows = read.result()
            else:
                # Several reads (piles of a group, runs of an order): on a remote store, every request of them
                # goes out now, not a read's after the one before (a no-op for the reads started ahead).
                fetched = self._piles.fetch(self.job)
                rows = self._piles.read_runs(unit.spans)
            return self._shuffled(rows, unit)
        except Exception as error:
            raise self._noted(error) from None
        finally:
            self._piles.forget(fetched)  # what a failed read left; nothing after one that read it all

    def finish(self) -> ShuffledPile | None:
        """The pile, read here with a background thread's help, or ``None`` if it has not started a shared read."""
        read, unit = self._read, self._unit
        if read is None or unit is None:
            return None
        try:
            rows = read.result()
            return self._shuffled(rows, unit)
        except Exception as error:
            raise self._noted(error) from None

    def _shuffled(self, rows: Any, unit: ReadPlan) -> ShuffledPile:
        piles = self._piles
        n_rows = sum(stop - start for start, stop in unit.spans)
        what = f"{piles.units.describe(self.job)} of {piles.store!r} for epoch {self.job.epoch}"
        return ShuffledPile(rows, piles.reader.as_arrays(rows), unit.order, n_rows, what)

    def _noted(self, error: Exception) -> Exception:
        if not any(isinstance(note, ReadingNote) for note in getattr(error, "__notes__", ())):
            what = self._piles.units.describe(self.job)
            error.add_note(
                ReadingNote(f"daskshuffle was reading {what} of {self._piles.store!r} for epoch {self.job.epoch}.")
            )
        return error


class ReadingNote(str):
    """The note an error of a pile's read gets: what was read, for which epoch; one per error, however often raised."""


class LoaderReads:
    """Reads the units of an epoch (:class:`~daskshuffle.loader._read_units.ReadUnits`) through a thread-safe :class:`PileReader`."""

    def __init__(
        self,
        reader: PileReader[Any],
        store: str,
        units: EpochReads,
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
        #: The epochs' read units: piles, groups of piles, an order's units or a mixture's.
        self.units = units
        #: Whether every consumer's reads run in background threads (see the module's docstring): the reader's are
        #: mostly decoding, or the units are groups of many chunk files.
        self.background = bool(reader.decodes) or isinstance(units, UnitGroups)

    def spans(self, job: Read) -> list[tuple[int, int]]:
        """The runs of store rows that ``job`` reads, each with one call to the reader."""
        return self.units.spans(job)

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
