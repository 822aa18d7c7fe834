"""The interface of a finished pile store opened for reading, the one thing the loader reads through.

The defaults here read a pile as its rows and gather batches from numpy arrays;
a kind of store overrides what it can do better (read runs straight into one set
of arrays, fetch ahead on object storage, keep files in a local cache).
"""

from __future__ import annotations

import functools
import os
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, Self

import numpy as np
from numpy.typing import NDArray

from .._errors import DaskShuffleValueError
from ..formats import Rows
from ..pilestore import RUN_KEY
from ..storage import Cache, Fetches, Location, Request, StoreCache
from ._cancel import ReadsUnderWay

__all__ = ["ComposedReader", "PileReader", "RowsKind"]


class RowsKind(Protocol[Rows]):
    """The rows a pile reader hands out, and the batches the loader makes of them."""

    def take(self, rows: Rows, index: NDArray[np.intp]) -> Rows:
        """The rows at ``index``, in that order."""

    def concat(self, parts: Sequence[Rows]) -> Rows:
        """The rows of ``parts`` one after the other."""

    def n_rows_of(self, rows: Rows) -> int:
        """How many rows ``rows`` holds."""

    def to_batch(self, rows: Rows) -> Any:
        """What the loader yields for ``rows``: a batch of the reader's ``batch_format``."""

    def as_arrays(self, rows: Rows) -> dict[str, NDArray[Any]] | None:
        """``rows`` as numpy arrays that batches are gathered from directly, or ``None`` (then :meth:`take`).

        Arrays only where the two give the same batches.
        """

    def schema(self, rows: Rows) -> dict[str, str]:
        """Each variable's type in ``rows``, as messages name it (a dtype and row shape, or an Arrow type)."""

    def nbytes(self, rows: Rows) -> int:
        """Bytes ``rows`` take in memory."""


class PileReader(ABC, Generic[Rows]):
    """A complete pile store opened for reading."""

    #: The kind of pile store, as messages name it (``"Zarr"``, ``"Parquet"``).
    kind: ClassVar[str] = ""
    #: The batch formats its :attr:`rows` hand out, each with what a batch is.
    batch_formats: ClassVar[Mapping[str, str]] = {"numpy": "dicts of numpy arrays"}
    metadata: Mapping[str, Any]
    #: The store as it was given, as messages name it.
    store: str
    batch_format: str
    #: What the rows read here are, and the batches of :attr:`batch_format` the loader makes of them.
    rows: RowsKind[Rows]
    #: The files (or byte ranges) of a remote store fetched ahead of their reads, keyed by ``(start, stop, holder)``:
    #: the span of rows read, and the loader's read it is for (``None``: a read's own).
    _fetches: Fetches | None = None
    #: The reads under way, to cancel when whoever waits for them has gone (:meth:`cancel_reads`).
    _under_way: ReadsUnderWay

    def __init__(
        self,
        store: str | os.PathLike[str] | Location,
        variables: Sequence[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        batch_format: str = "numpy",
        **options: Any,
    ) -> None:
        """Open ``store`` (a path, URL or ``Location``) to read ``variables`` (all by default).

        ``batch_format`` is one of :attr:`batch_formats`, checked before anything
        is read; ``options`` are the kind's own (:meth:`_open`).
        """
        formats = self.batch_formats
        if batch_format not in formats:
            named = [f"{name!r} ({what})" for name, what in formats.items()]
            others = sorted({reader.kind for reader in _readers() if batch_format in reader.batch_formats})
            raise DaskShuffleValueError(
                f"Expected batch_format={', '.join(named[:-1])}{' or ' if len(named) > 1 else ''}{named[-1]} for a "
                f"{self.kind} pile store. Got {batch_format!r} instead"
                + (f"; {batch_format!r} batches come from {' and '.join(others)} pile stores." if others else "."),
                parameter="batch_format",
            )
        self.store = str(store)
        self.batch_format = batch_format
        self._under_way = ReadsUnderWay()
        self._open(Location.of(store, storage_options), variables, **options)

    def _open(self, location: Location, variables: Sequence[str] | None) -> None:
        """Read the store's metadata at ``location`` and open what reads of ``variables`` need."""
        raise TypeError(f"{type(self).__name__} opens no pile store of its own")

    @property
    def n_rows(self) -> int:
        return int(self.metadata["n_rows"])

    @property
    def pile_offsets(self) -> NDArray[np.int64]:
        return np.asarray(self.metadata["pile_offsets"], dtype=np.int64)

    @abstractmethod
    def read_rows(self, start: int, stop: int) -> Rows:
        """Rows ``start:stop`` of the store."""

    def read_pile(self, pile: int) -> Rows:
        """Every row of pile ``pile``, as stored (damage: a ``CorruptPileStoreError`` naming the pile)."""
        offsets = self.pile_offsets
        return self.read_rows(int(offsets[pile]), int(offsets[pile + 1]))

    def read_runs(self, runs: Sequence[tuple[int, int]]) -> Rows:
        """Store rows ``start:stop`` of each of ``runs``, one run after the other (a group of units the loader mixes)."""
        parts = [self.read_rows(start, stop) for start, stop in runs or [(0, 0)]]
        return parts[0] if len(parts) == 1 else self.rows.concat(parts)

    @abstractmethod
    def member_chunk_rows(self) -> list[dict[str, tuple[int, int]]]:
        """Of each store this reader reads through (one: its own), each variable's rows per chunk and bytes per row.

        The loader's units are whole chunks of one store.
        """

    @property
    def segments(self) -> NDArray[np.int64] | None:
        """``(n, 4)``: where the rows lie in the stores read through (start, start there, rows, store); ``None``: one
        store. No unit of the loader crosses a segment."""
        return None

    def cancel_reads(self, threads: str | None = None) -> None:
        """Stop the reads under way started by threads named ``threads...`` (every read by default).

        For a loader's reads that nobody waits for any more: each stops after
        the file it is reading (or at once, in a wait for a fetch) and raises
        :class:`~daskshuffle.readers.ReadCancelledError`; other reads go on.
        """
        self._under_way.cancel(threads)

    def recycle(self, rows: dict[str, NDArray[Any]]) -> None:
        """Take back arrays of rows read here that nothing uses any more, to read into; by default none are kept."""

    def empty(self) -> Any:
        """No rows, to learn each variable's dtype and row shape from: arrays by variable, else a batch (:attr:`rows`)."""
        rows = self.read_rows(0, 0)
        arrays = self.rows.as_arrays(rows)
        return arrays if arrays is not None else self.rows.to_batch(rows)

    def fetch(self, start: int, stop: int, holder: Hashable = None) -> None:
        """Start fetching the files of rows ``start:stop`` for the read ``holder``, until it reads them or :meth:`forget`.

        Only where :attr:`fetches`, and once for one span and holder. A file
        that two holders' spans need is fetched once, and kept until both let
        go of it: a read of the same rows for another holder (the next epoch,
        a stream repeated) does not lose its fetch when this one forgets.
        """
        self._fetch(start, stop, holder, counted=True)

    def _fetch(self, start: int, stop: int, holder: Hashable, counted: bool) -> None:
        """:meth:`fetch`, with the bytes of rows counted in :attr:`fetched_nbytes` or not (a read's own fetch)."""
        stop = max(start, min(stop, self.n_rows))
        key = (start, stop, holder)
        if self._fetches is not None and stop > start and key not in self._fetches:
            requests, nbytes = self._requests(start, stop)
            if requests:  # else all cached: nothing in flight, nothing held against the budget
                self._fetches.start(key, requests, nbytes if counted else 0)

    def _requests(self, start: int, stop: int) -> tuple[Sequence[Request], int]:
        """The requests of rows ``start:stop`` (but for files cached), and the bytes of the rows: a remote store's."""
        return [], 0

    @property
    def fetches(self) -> bool:
        """Whether reads are requests to a store that serves many at once: then the loader fetches ahead."""
        return self._fetches is not None

    def forget(self, start: int, stop: int, holder: Hashable = None) -> None:
        """Let go of what :meth:`fetch` started for rows ``start:stop`` and ``holder``; requests no read needs stop."""
        if self._fetches is not None:
            self._fetches.drop((start, max(start, min(stop, self.n_rows)), holder))

    @property
    def caches(self) -> bool:
        """Whether :meth:`use_cache` keeps the store's files on a local disk: a remote store, by default."""
        return self._fetches is not None

    def use_cache(self, cache: Cache) -> None:
        """Keep the files read from now on in ``cache``, and read them from there (only where :attr:`caches`)."""

    def _store_cache(self, cache: Cache) -> StoreCache:
        """This store's part of ``cache``, keyed on its run too: a store shuffled again holds other bytes."""
        key, run = str(self.metadata["fingerprint"]), self.metadata.get(RUN_KEY)
        return StoreCache(cache, key if run is None else f"{key}-{run}")

    @property
    def fetched_nbytes(self) -> int:
        """Bytes of rows fetched (or being fetched) ahead and not read yet."""
        return 0 if self._fetches is None else self._fetches.nbytes

    def owns_thread(self) -> bool:
        """Whether the calling thread is one of the reader's own (a decoder, a fetch), which reads wait for."""
        return self._fetches is not None and self._fetches.owns_thread()

    def close(self) -> None:
        """Stop every read and fetch, and release what the reader holds. The loader calls it when it closes."""
        self._under_way.cancel()
        if self._fetches is not None:
            self._fetches.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _readers() -> Iterator[type[PileReader[Any]]]:
    """Every kind of pile reader there is (defined so far), at any depth below :class:`PileReader`."""
    waiting = PileReader.__subclasses__()
    while waiting:
        reader = waiting.pop()
        yield reader
        waiting.extend(reader.__subclasses__())


class ComposedReader(PileReader[Rows]):
    """A pile reader that reads through other pile readers, :attr:`members`, of one kind of rows.

    It :attr:`caches` and :attr:`fetches` where any member does; a cache, a
    fetch and :meth:`close` reach every member. Rows in memory and batches are
    the first member's.
    """

    #: The readers read through, in order.
    members: Sequence[PileReader[Any]]

    @property
    def rows(self) -> RowsKind[Rows]:  # type: ignore[override]
        return self.members[0].rows

    @property
    def caches(self) -> bool:
        return any(reader.caches for reader in self.members)

    def use_cache(self, cache: Cache) -> None:
        for reader in self.members:
            reader.use_cache(cache)

    def member_chunk_rows(self) -> list[dict[str, tuple[int, int]]]:
        """A member that reads through several stores counts as its first."""
        return [reader.member_chunk_rows()[0] for reader in self.members]

    @functools.cached_property
    def segments(self) -> NDArray[np.int64]:
        """Pile ``p`` is pile ``p`` of each member in turn: a segment for each member's part of each pile."""
        offsets = np.stack([np.asarray(reader.pile_offsets, dtype=np.int64) for reader in self.members])
        sizes = np.diff(offsets, axis=1)  # (members, piles)
        starts = np.cumsum(np.concatenate([[0], sizes.T.reshape(-1)]))[:-1].reshape(sizes.shape[1], -1).T
        member = np.repeat(np.arange(len(sizes)), sizes.shape[1])
        rows = np.stack([starts.reshape(-1), offsets[:, :-1].reshape(-1), sizes.reshape(-1), member], axis=1)
        return rows[np.argsort(rows[:, 0], kind="stable")].astype(np.int64)

    def _spans(self, start: int, stop: int) -> Iterator[tuple[PileReader[Any], int, int]]:
        """The part of each segment (:attr:`segments`) in rows ``start:stop``: its member, and its rows there."""
        table, stop = self.segments, max(start, min(stop, self.n_rows))
        first = max(int(np.searchsorted(table[:, 0], start, side="right")) - 1, 0)
        last = int(np.searchsorted(table[:, 0], stop, side="left"))
        for begin, there, size, member in table[first:last].tolist():
            a, b = max(start, begin), min(stop, begin + size)
            if a < b:
                yield self.members[member], there + a - begin, there + b - begin

    def read_rows(self, start: int, stop: int) -> Rows:
        """Rows ``start:stop``: the part of each segment read by its member, one after the other."""
        parts = [member.read_rows(a, b) for member, a, b in self._spans(start, stop)] or [
            self.members[0].read_rows(0, 0)
        ]
        return parts[0] if len(parts) == 1 else self.rows.concat(parts)

    @property
    def fetches(self) -> bool:
        return any(reader.fetches for reader in self.members)

    def fetch(self, start: int, stop: int, holder: Hashable = None) -> None:
        """Each member starts fetching its part of rows ``start:stop``: the spans :meth:`read_rows` reads there."""
        for member, a, b in self._spans(start, stop):
            member.fetch(a, b, holder)

    def forget(self, start: int, stop: int, holder: Hashable = None) -> None:
        for member, a, b in self._spans(start, stop):
            member.forget(a, b, holder)

    @property
    def fetched_nbytes(self) -> int:
        return sum(reader.fetched_nbytes for reader in self.members)

    def cancel_reads(self, threads: str | None = None) -> None:
        for reader in self.members:
            reader.cancel_reads(threads)

    def owns_thread(self) -> bool:
        return any(reader.owns_thread() for reader in self.members)

    def close(self) -> None:
        for reader in self.members:
            reader.close()
