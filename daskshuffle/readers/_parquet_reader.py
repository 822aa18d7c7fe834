"""Reading a Parquet pile store: lazily, from several threads at once, checked.

On object storage a read needs the column chunks of its row groups and nothing
else (the footers are read when the store is opened): their byte ranges are
requested all at once, and pyarrow decodes the row groups from the bytes fetched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._errors import CorruptPileStoreError
from .._threads import LazyPool
from ..formats import (
    Fetched,
    FetchedFile,
    Range,
    bytes_of,
    coalesce,
    concat,
    dense_values,
    is_nested,
    take,
    to_numpy,
    with_footer_tails,
)
from ..pilestore import (
    check_recorded_rows,
    metadata_disagrees,
    part_binding,
    read_sidecar,
    select_variables,
)
from ..storage import Cache, Fetches, Location, Request, StoreCache, fetched_each, raise_storage_failure
from ._cancel import CancellableRead
from ._opened import Opened
from ._parquet_parts import PartFiles, Piece
from ._pile_reader import PileReader

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ParquetPileReader"]


class ParquetPileReader(PartFiles, PileReader["pa.Table"]):
    """A complete Parquet pile store, opened read-only; safe to share between threads.

    In ``"numpy"`` batches numbers with nulls are float with NaN, fixed-size
    lists of numbers (embeddings) arrays of one more dimension, strings and
    other nested values object arrays. Every read checks page checksums, a
    readable footer, and part files that hold rows ``0:n_rows`` without a gap;
    a damaged part file raises :class:`~daskshuffle.CorruptPileStoreError`
    when its rows are read, so a reader of other rows is not stopped by it.

    Examples
    --------
    >>> reader = ParquetPileReader("piles.parquet")
    >>> reader.read_rows(0, 10).num_rows
    10
    """

    kind = "Parquet"
    batch_formats: ClassVar[Mapping[str, str]] = {
        "numpy": "dicts of numpy arrays",
        "arrow": "pyarrow.RecordBatch batches",
        "pandas": "pandas.DataFrame batches",
    }

    def _open(self, location: Location, variables: Sequence[str] | None) -> None:
        self.metadata = read_sidecar(location)
        self.run, self._row_group_rows = part_binding(self.metadata, self.store)
        self._open_parts(location, select_variables(self.metadata, variables))
        self._fetches = None if self.local else Fetches(self._fs)
        self.rows = TableRows(self.batch_format)
        self._cache: StoreCache | None = None
        #: Bytes of a part file fetched by one request, at most: a longer run of column chunks is cut in such ranges.
        self._range_nbytes = int_setting("parquet-reader.range-nbytes")
        #: The threads that decode the runs of a group together (:meth:`read_runs`), made at the first group.
        self._decoders = LazyPool(int_setting("parquet-reader.group-threads"), "parquet-decode")
        self._check_parts()
        self._opened = Opened.of(location, self.metadata)

    def _check_parts(self) -> None:
        """Check the part files' rows, from their footers, against the sidecar (an unreadable one: when read)."""

        def n_rows(index: int, tail: tuple[int, bytes] | None) -> int | None:
            try:
                return int(self._layout(index, None, tail).group_starts[-1])
            except CorruptPileStoreError:
                return None

        sizes = self._part_sizes
        fs = None if self.local or None in sizes else self._fs
        files = [(path, size or 0) for path, size in zip(self.part_paths, sizes, strict=True)]
        threads = int_setting("parquet-reader.footer-threads")
        in_flight = int_setting("fetch.in-flight")
        # The first part's footer first: its columns are those every other part's must match (threads read the rest).
        counts = with_footer_tails(fs, files[:1], n_rows, in_flight, threads)
        counts += with_footer_tails(fs, files[1:], lambda index, tail: n_rows(index + 1, tail), in_flight, threads)
        readable = np.asarray([count is not None for count in counts], dtype=bool)
        ends = self.part_starts + np.asarray([count or 0 for count in counts], dtype=np.int64)
        whole = readable.all() and self.part_starts[:1].tolist() == [0] and (ends[:-1] == self.part_starts[1:]).all()
        if whole and int(ends[-1]) >= self.n_rows:  # fewer rows: a missing last part, as good as a gap
            check_recorded_rows(self.metadata, self.store, {"the part files": int(ends[-1]) if len(ends) else 0})
            return
        check_recorded_rows(self.metadata, self.store, {})
        if readable.any() and (end := int(ends[readable].max())) > self.n_rows:
            path = self.part_paths[int(np.flatnonzero(readable & (ends == end))[0])]
            raise metadata_disagrees(
                self.store,
                "the part files to end within n_rows",
                f"n_rows = {self.n_rows:,} and {path!r} ending at row {end:,}",
            )

    def _read(self, start: int, stop: int, pile: int | None, read: CancellableRead) -> pa.Table:
        read.check()  # a run of a group not begun when its read was cancelled fetches nothing
        with self._opened.unchanged(self.store):  # damage from a store shuffled again since is no damage
            pieces = self._pieces(start, stop, pile)
            if not pieces:
                return self._empty()
            fetched = self._take(start, stop, pieces)
            tables = []
            for piece, found in zip(pieces, fetched, strict=True):
                read.check()
                if found is None:
                    table = self._read_again(piece, pile, read)
                else:
                    table = self._decode(piece, *found, pile, read)
                first = int(piece.layout.group_starts[piece.groups[0]])
                tables.append(table.slice(piece.a - first, piece.b - piece.a))
            return concat(tables)

    def member_chunk_rows(self) -> list[dict[str, tuple[int, int]]]:
        """Each column's rows per row group (row groups end at every multiple of them); widths do not matter."""
        return [dict.fromkeys(self.columns, (self._row_group_rows, 1))]

    def _requests(self, start: int, stop: int) -> tuple[Sequence[Request], int]:
        """The column chunks of rows ``start:stop`` and their part files' footers (none of a missing part file)."""
        try:
            pieces = self._pieces(start, stop, None)
        except CorruptPileStoreError:
            return [], 0
        _, requests, nbytes = self._plan(pieces)
        return requests, nbytes

    def owns_thread(self) -> bool:
        return self._decoders.owns() or super().owns_thread()

    def use_cache(self, cache: Cache) -> None:
        if self._fetches is not None:
            self._cache = self._store_cache(cache)

    def _plan(self, pieces: list[Piece]) -> tuple[list[list[Range]], list[Request], int]:
        """Each of ``pieces``' byte ranges; the requests to fetch (ranges not cached, footers not kept); decoded bytes."""
        planned = [self._ranges(piece) for piece in pieces]
        cache = self._cache
        requests: list[Request] = [
            request
            for ranges, _ in planned
            for request in ranges
            if cache is None or not cache.holds(_cache_key(request))  # cached ranges are read when their read comes
        ]
        requests += [tail for piece in pieces if (tail := self._tail(piece.file)) is not None]
        return [ranges for ranges, _ in planned], requests, sum(nbytes for _, nbytes in planned)

    def _ranges(self, piece: Piece) -> tuple[list[Range], int]:
        """The byte ranges of ``piece``'s column chunks (cut at ``range-nbytes``), and their decoded bytes."""
        chunks = piece.layout.chunks[piece.groups[0] : piece.groups[-1] + 1].reshape(-1, 3)
        runs = coalesce(((int(first), int(end)) for first, end in chunks[:, :2]), gap=0)
        path = self.part_paths[piece.file]
        size = self._range_nbytes
        ranges = [(path, cut, min(cut + size, end)) for first, end in runs for cut in range(first, end, size)]
        return ranges, int(chunks[:, 2].sum())

    def _take(self, start: int, stop: int, pieces: list[Piece]) -> list[tuple[list[Fetched], Fetched | None] | None]:
        """Each piece's fetched column chunks and footer (``None``: not all there), fetched now if not ahead."""
        fetches = self._fetches
        if fetches is None:
            return [None] * len(pieces)
        key = (start, stop, None)
        # This read's own requests, which share the fetches under way (the loader's ahead of it): the ranges of its plan.
        planned, requests, _ = self._plan(pieces)
        if requests:
            fetches.start(key, requests, nbytes=0)
        found: list[tuple[list[Fetched], Fetched | None] | None] = []
        for piece, ranges in zip(pieces, planned, strict=True):
            taken = [(request, self._from_cache(request) or fetches.take(key, request)) for request in ranges]
            complete = [(request, future) for request, future in taken if future is not None]
            tail = self._tail(piece.file)
            footer = None if tail is None else fetches.take(key, tail)
            fetched_footer = None if tail is None or footer is None else (tail, footer)
            # A range missing: taken by a read of the same rows at the same time, or forgotten. Read the file.
            found.append((complete, fetched_footer) if len(complete) == len(taken) else None)
        fetches.drop(key)  # what no piece took
        return found

    def _decode(
        self, piece: Piece, ranges: list[Fetched], tail: Fetched | None, pile: int | None, read: CancellableRead
    ) -> pa.Table:
        """The row groups of ``piece`` from their fetched bytes, with the page checksums checked.

        A request not served raises :class:`~daskshuffle.StorageAccessError`;
        any other failure reads the part file again without fetching, which
        gives the rows, or the error naming the columns that fail.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.part_paths[piece.file]
        for _, future in ranges if tail is None else [*ranges, tail]:
            read.wait(future, path)  # a stalled request waits for its deadline, or a cancel
        try:
            with self._lock:
                footer = self._parts.get(piece.file)
            if footer is None and tail is not None:
                # The footer and its trailer after the leading magic: a file pyarrow reads the footer of.
                footer = self._keep(piece.file, pq.ParquetFile(pa.BufferReader(b"PAR1" + bytes_of(tail)[1])).metadata)
            if footer is None:
                footer = self._part(piece.file, pile)
            with pa.PythonFile(FetchedFile([bytes_of(found) for found in ranges]), mode="r") as handle:
                # Without pre_buffer, which would coalesce reads across the columns not read (bytes not fetched).
                file = pq.ParquetFile(handle, metadata=footer, page_checksum_verification=True, pre_buffer=False)
                table = file.read_row_groups(piece.groups, columns=self.columns)
        except Exception as error:
            # Not served (throttled, no credentials): a read again would meet the same.
            raise_storage_failure(error, self.store, what=path)
            if self._cache is not None:  # a cached range may be what failed its checksum: it is fetched next time
                for request, _ in ranges:
                    self._cache.evict(_cache_key(request))
            return self._read_again(piece, pile, read)
        if self._cache is not None:
            for request, future in ranges:
                if not self._cache.holds(_cache_key(request)):
                    self._cache.write(_cache_key(request), future.result())
        return table

    def _read_again(self, piece: Piece, pile: int | None, read: CancellableRead) -> pa.Table:
        """The row groups of ``piece`` read again, the columns that fail named: a local file, or on object storage its
        byte ranges requested anew (not those fetched ahead or cached), each within its deadline, until a cancel."""
        if self.local:
            return self._read_groups(piece.file, piece.groups, pile)
        path = self.part_paths[piece.file]
        ranges, _ = self._ranges(piece)
        answers = fetched_each(self._fs, ranges, wait=lambda future: read.wait(future, path))
        for answer in answers:
            if isinstance(answer, Exception):
                raise_storage_failure(answer, self.store, what=path)  # not served: nothing is damaged
                raise self._corrupt(f"a part file that fails to read ({answer!r})", path, pile, self.columns)
        fetched = [(start, data) for (_, start, _), data in zip(ranges, answers, strict=True)]
        return self._read_groups(piece.file, piece.groups, pile, fetched)

    def _from_cache(self, request: Range) -> Future[bytes] | None:
        """The bytes of ``request`` from the cache, as a done fetch (``None``: not there)."""
        data = None if self._cache is None else self._cache.read(_cache_key(request), request[2] - request[1])
        if data is None:
            return None
        done: Future[bytes] = Future()
        done.set_result(data)
        return done

    def read_rows(self, start: int, stop: int) -> pa.Table:
        return self._read(start, stop, None, self._under_way.begin())

    def read_pile(self, pile: int) -> pa.Table:
        offsets = self.pile_offsets
        return self._read(int(offsets[pile]), int(offsets[pile + 1]), pile, self._under_way.begin())

    def read_runs(self, runs: Sequence[tuple[int, int]]) -> pa.Table:
        """Rows of each of ``runs``, one after the other; decoded ``parquet-reader.group-threads`` at a time."""
        runs = runs or [(0, 0)]
        read = self._under_way.begin()  # of this thread, whichever decodes its runs
        if len(runs) == 1:
            return self._read(runs[0][0], runs[0][1], None, read)
        # One chunk a column, the runs' own let go: the batches' numpy views are of it, not of a copy beside them.
        return concat(
            list(self._decoders.get().map(lambda run: self._read(run[0], run[1], None, read), runs))
        ).combine_chunks()

    def close(self) -> None:
        """Stop every read and fetch; reading again starts new threads."""
        self._under_way.cancel()
        self._decoders.shutdown()  # first: a decoder still starting fetches starts them before they are cleared
        super().close()
        with self._lock:
            self._parts.clear()


class TableRows:
    """Rows as a ``pyarrow.Table``, and batches of them in ``batch_format``."""

    def __init__(self, batch_format: str) -> None:
        self.batch_format = batch_format

    take = staticmethod(take)
    concat = staticmethod(concat)

    def n_rows_of(self, rows: pa.Table) -> int:
        return int(rows.num_rows)

    def schema(self, rows: pa.Table) -> dict[str, str]:
        return {field.name: str(field.type) for field in rows.schema}

    def nbytes(self, rows: pa.Table) -> int:
        return int(rows.nbytes)

    def as_arrays(self, rows: pa.Table) -> dict[str, NDArray[Any]] | None:
        nested = [rows.column(index) for index, field in enumerate(rows.schema) if is_nested(field.type)]
        if self.batch_format != "numpy" or any(dense_values(column) is None for column in nested):
            # Nested values as numpy views would keep the whole pile alive in a batch: taken as Arrow first.
            return None
        # Read-only views where Arrow allows: batches are gathered from them into new arrays.
        return {name: to_numpy(rows.column(name), writeable=False) for name in rows.column_names}

    def to_batch(self, rows: pa.Table) -> Any:
        import pyarrow as pa

        if self.batch_format == "arrow":
            return (
                rows.combine_chunks().to_batches()[0]
                if rows.num_rows
                else pa.RecordBatch.from_pylist([], schema=rows.schema)
            )
        if self.batch_format == "pandas":
            return rows.to_pandas()
        return {name: to_numpy(rows.column(name)) for name in rows.column_names}


def _cache_key(request: Range) -> str:
    path, start, end = request
    return f"{path}#{start}-{end}"
