"""Reading a Parquet pile store: lazily, from several threads at once, checked.

The store is what ``ArrowFormat`` writes (:mod:`daskshuffle.formats._parquet`):
part files ``part-<first row>.parquet`` of whole piles, a row group per pile,
with page checksums, and the shuffle's metadata in ``_daskshuffle.json``.

On object storage a read needs the column chunks of its row groups and nothing
else (the footers are read when the store is opened, and kept): their byte
ranges, from the footers, are requested all at once through
:class:`~daskshuffle.storage._fetch.Fetches`, by the loader ahead of the read
(:meth:`ParquetPileReader.fetch`) or by the read itself, and pyarrow decodes
the row groups from the bytes fetched (:class:`_FetchedFile`).
"""

from __future__ import annotations

import bisect
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from numpy.typing import NDArray

from .._errors import CorruptPileStoreError, DaskShuffleValueError, IncompletePileStoreError, SourceNotFoundError
from ..storage._fetch import IN_FLIGHT, Fetches
from ..storage._location import Location
from ._parquet_store import METADATA_FILE, PART, arrow_filesystem, concat, part_name, take
from ._pile_metadata import check_pile_metadata, check_recorded_rows, metadata_disagrees, select_variables
from ._pile_reader import PileReader

__all__ = ["FOOTERS_KEPT", "RANGE_NBYTES", "ParquetPileReader", "read_metadata"]


# -- reading a pile store ---------------------------------------------------------------
def read_metadata(store: Location) -> dict[str, Any]:
    """The sidecar of a Parquet pile store, checked to be complete and of this format version."""
    where = store.url
    fs, root = store.fs, store.path
    try:
        # One request for a store that is there (on object storage, each costs tens of milliseconds).
        sidecar = fs.cat_file(f"{root}/{METADATA_FILE}")
    except OSError:  # the checks below name what is wrong: no store, refused credentials, no sidecar
        sidecar = None
    if sidecar is None and not store.exists():
        raise SourceNotFoundError(f"Expected an existing pile store. Got {where!r}, which does not exist, instead.")
    try:
        if sidecar is None:
            with fs.open(f"{root}/{METADATA_FILE}", "r") as file:
                metadata = json.load(file)
        else:
            metadata = json.loads(sidecar)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise IncompletePileStoreError(
            f"Expected a Parquet pile store written by daskshuffle. Got {where!r}, which has no readable "
            f"{METADATA_FILE}, instead."
        ) from error
    check_pile_metadata(metadata, where)
    return dict(metadata)


#: Part file footers a :class:`ParquetPileReader` keeps; files themselves are open only during a read.
FOOTERS_KEPT = 64
#: Footers read at once when a reader opens a store on object storage (local files are read one after another).
FOOTER_THREADS = 16
#: Bytes at the end of a remote part file requested for its footer: what pyarrow reads first (its default footer
#: read size). A larger footer costs a second request.
FOOTER_NBYTES = 64 * 2**10


#: Bytes of a part file fetched by one request, at most: a longer run of column chunks is cut in ranges of this size.
RANGE_NBYTES = 8 * 2**20

Range = tuple[str, int, int]
#: A byte range and its fetch.
Fetched = tuple[Range, Future[bytes]]


class _Part(NamedTuple):
    """A part file's footer and the first row of each of its row groups (and the end)."""

    footer: pq.FileMetaData
    group_starts: NDArray[np.int64]


class _Layout(NamedTuple):
    """What planning a read of a part file needs, kept for every part file once its footer was read.

    A few integers per column chunk, where a footer takes hundreds of bytes:
    a store of many part files keeps every layout and :data:`FOOTERS_KEPT` footers.
    """

    group_starts: NDArray[np.int64]
    #: Of each row group (axis 0) and column read (axis 1): first byte, end byte and decoded bytes of its column chunk
    #: (no columns for a local store).
    chunks: NDArray[np.int64]
    #: Bytes at the end of the file that hold the footer, its length and the magic.
    footer_nbytes: int


class _Piece(NamedTuple):
    """The rows ``a:b`` (from its first row) of part file number ``file`` that a read needs, in row groups ``groups``."""

    file: int
    layout: _Layout
    a: int
    b: int
    groups: list[int]


class _FetchedFile:
    """Byte ranges of a part file, fetched, read as the file by ``pyarrow.PythonFile`` (no copy within a range).

    Its size is the end of the last range: pyarrow reads a row group's column
    chunks, from the footer it is given, and nothing else. A read of bytes not
    fetched raises ``OSError``.
    """

    closed = False

    def __init__(self, ranges: list[tuple[int, bytes]]) -> None:
        self._ranges = sorted(ranges, key=lambda found: found[0])
        self._starts = [start for start, _ in self._ranges]
        self._size = max((start + len(data) for start, data in self._ranges), default=0)
        self._position = 0

    def seek(self, position: int, whence: int = 0) -> int:
        self._position = position + (0, self._position, self._size)[whence]
        return self._position

    def tell(self) -> int:
        return self._position

    def read_buffer(self, nbytes: int) -> memoryview | bytes:
        start = self._position
        stop = min(start + nbytes, self._size)
        parts: list[memoryview] = []
        index = bisect.bisect_right(self._starts, start) - 1
        position = start
        while position < stop:
            if index < 0 or index >= len(self._ranges):
                raise OSError(f"bytes {position}:{stop} of the part file were not fetched")
            first, data = self._ranges[index]
            if not first <= position < first + len(data):
                raise OSError(f"bytes {position}:{stop} of the part file were not fetched")
            end = min(stop, first + len(data))
            parts.append(memoryview(data)[position - first : end - first])
            position, index = end, index + 1
        self._position = stop
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self, nbytes: int = -1) -> bytes:
        return bytes(self.read_buffer(self._size - self._position if nbytes < 0 else nbytes))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class ParquetPileReader(PileReader[pa.Table]):
    """A complete Parquet pile store, opened read-only.

    ``to_batch`` hands out ``batch_format`` batches: ``"numpy"`` (a dict of
    numpy arrays: numbers without nulls as their dtype, with nulls as float
    with NaN, fixed-size lists of numbers without nulls (embeddings) as arrays
    of one more dimension, strings and other nested values as object arrays),
    ``"arrow"`` (a ``pyarrow.RecordBatch``) or ``"pandas"`` (a ``pandas.DataFrame``).

    Part files are opened only when their rows are read, one file handle per
    read in progress, so the reader is safe to share between threads and holds
    no descriptor between reads; the footers of the last :data:`FOOTERS_KEPT`
    part files used are kept. On object storage (any filesystem but a local
    one) the reader :attr:`fetches`: the byte ranges of the column chunks a
    read needs are requested all at once, ahead of it if the loader asks
    (:meth:`fetch`). Every read checks what it reads: page checksums
    (written by the shuffle), a readable footer, and part files that together
    hold rows ``0:n_rows`` without a gap. A missing, truncated or corrupted part
    file raises :class:`~daskshuffle.CorruptPileStoreError` naming the store,
    the pile, the columns and the file, when its rows are read, so a reader of
    other rows is not stopped by it.

    Examples
    --------
    >>> reader = ParquetPileReader("piles.parquet")
    >>> reader.read_rows(0, 10).num_rows
    10
    """

    #: pyarrow decodes a pile's row groups in one call that releases the GIL.
    decodes = True

    def __init__(
        self,
        store: str | os.PathLike[str] | Location,
        variables: Sequence[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        batch_format: str = "numpy",
    ) -> None:
        location = Location.of(store, storage_options)
        self.store = str(store)
        self.metadata = read_metadata(location)
        names = select_variables(self.metadata, variables)
        if batch_format not in ("numpy", "arrow", "pandas"):
            raise DaskShuffleValueError(
                f"Expected batch_format to be 'numpy', 'arrow' or 'pandas'. Got {batch_format!r} instead."
            )
        self.columns = names
        self.batch_format = batch_format
        self._filesystem, root = arrow_filesystem(location)
        fs = location.fs
        parts = sorted(
            (int(match.group(1)), entry["name"], entry.get("size"))
            for entry in fs.ls(root, detail=True)
            if (match := PART.fullmatch(entry["name"].rsplit("/", 1)[-1]))
        )
        self.part_starts = np.asarray([start for start, _, _ in parts], dtype=np.int64)
        self.part_paths = [path for _, path, _ in parts]
        self._part_sizes = [size for _, _, size in parts]  # as listed: a remote footer is read with one request
        self._fs = fs
        self._root = root
        self._parts: OrderedDict[int, _Part] = OrderedDict()
        self._lock = threading.Lock()
        local = isinstance(fs, LocalFileSystem)
        #: Byte ranges of part files fetched ahead of their reads, keyed by the span of rows read (not for local files).
        self._fetches = None if local else Fetches(fs)
        self._leaves: list[int] | None = None  # the Parquet columns of the columns read
        self._layouts: list[_Layout | None] = [None] * len(self.part_paths)
        self._check_parts(1 if local else FOOTER_THREADS)

    def _check_parts(self, threads: int) -> None:
        """Check the sidecar against itself and against the part files' rows, from their footers (no data is read).

        A part file whose footer cannot be read, or a gap between part files or
        after the last (a missing one), is reported when its rows are read, so
        that a reader of other rows is not stopped by it; the part files that
        can be read must still end within the store's rows. Otherwise they must
        hold exactly the store's rows.
        """

        def n_rows(index: int, tail: tuple[int, bytes] | None = None) -> int | None:
            try:
                return int(self._part(index, None, tail).group_starts[-1])
            except CorruptPileStoreError:
                return None

        indices = range(len(self.part_paths))
        counts: list[int | None] = []
        if self._fetches is not None and len(indices) > 1:
            # The last bytes of many part files requested at once, their footers parsed by threads.
            with ThreadPoolExecutor(min(threads, len(indices)), thread_name_prefix="daskshuffle-footers") as pool:
                for batch in range(0, len(indices), IN_FLIGHT):
                    chosen = indices[batch : batch + IN_FLIGHT]
                    counts += pool.map(n_rows, chosen, self._footer_tails(chosen))
        else:
            counts = [n_rows(index) for index in indices]
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

    @classmethod
    def recognizes(cls, store: Location) -> bool:
        return store.join(METADATA_FILE).exists()

    # -- reading, checked ------------------------------------------------------
    def _corrupt(self, what: str, path: str, pile: int | None, columns: Sequence[str] | None = None) -> Exception:
        about = [f"pile {pile}"] if pile is not None else []
        about += [f"columns {list(columns)}"] if columns else []
        return CorruptPileStoreError(
            f"Expected intact part files in the pile store {self.store!r}. Got {what} in file {path!r}"
            f"{' (' + ', '.join(about) + ')' if about else ''} instead; shuffle the source again, or restore the file."
        )

    def _part(self, index: int, pile: int | None, tail: tuple[int, bytes] | None = None) -> _Part:
        """Part file ``index``'s footer, kept or read (from ``tail``, its last bytes, where given)."""
        with self._lock:
            part = self._parts.get(index)
            if part is not None:
                self._parts.move_to_end(index)
                return part
        path = self.part_paths[index]
        try:
            footer = self._read_footer(index, tail)
        except (OSError, pa.ArrowException) as error:
            raise self._corrupt(f"a part file whose footer cannot be read ({error})", path, pile) from error
        return self._keep(index, footer)

    def _keep(self, index: int, footer: pq.FileMetaData) -> _Part:
        """Keep ``footer`` of part file ``index`` among the last :data:`FOOTERS_KEPT`, and its layout for good."""
        sizes = [footer.row_group(group).num_rows for group in range(footer.num_row_groups)]
        part = _Part(footer, np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64))
        layout = self._layouts[index] or self._layout_of(part)
        with self._lock:
            self._layouts[index] = layout
            self._parts[index] = part
            self._parts.move_to_end(index)
            while len(self._parts) > FOOTERS_KEPT:
                self._parts.popitem(last=False)
        return part

    def _layout_of(self, part: _Part) -> _Layout:
        footer = part.footer
        # Byte ranges only where reads fetch them: a local store's open does not pay for them.
        leaves = self._columns_read(footer) if self._fetches is not None else []
        chunks = np.zeros((footer.num_row_groups, len(leaves), 3), dtype=np.int64)
        for group in range(footer.num_row_groups):
            row_group = footer.row_group(group)
            for position, leaf in enumerate(leaves):
                column = row_group.column(leaf)
                # Where pyarrow starts reading a column chunk: its dictionary page, if it has one, else its first data page.
                first = column.data_page_offset
                if column.has_dictionary_page and 0 < (column.dictionary_page_offset or 0) < first:
                    first = column.dictionary_page_offset
                chunks[group, position] = (first, first + column.total_compressed_size, column.total_uncompressed_size)
        return _Layout(part.group_starts, chunks, footer.serialized_size + 8)

    def _layout(self, index: int, pile: int | None) -> _Layout:
        """The layout of part file ``index``, from its footer (read if it never was)."""
        layout = self._layouts[index]
        if layout is None:
            self._part(index, pile)
            layout = self._layouts[index]
            assert layout is not None
        return layout

    def _footer_tails(self, indices: Sequence[int]) -> list[tuple[int, bytes] | None]:
        """The last :data:`FOOTER_NBYTES` of each part file of ``indices``, requested at once (``None``: not read)."""
        wanted = [index for index in indices if isinstance(self._part_sizes[index], int)]
        sizes = [int(self._part_sizes[index] or 0) for index in wanted]
        starts = [max(0, size - FOOTER_NBYTES) for size in sizes]
        paths = [self.part_paths[index] for index in wanted]
        found = dict(zip(wanted, self._fs.cat_ranges(paths, starts, sizes, on_error="return"), strict=True))
        tails: list[tuple[int, bytes] | None] = []
        for index, start in zip(wanted, starts, strict=True):
            data = found[index]
            tails.append((start, data) if isinstance(data, bytes) else None)  # an error: read again, and reported
        return tails if len(wanted) == len(indices) else [None] * len(indices)

    def _read_footer(self, index: int, tail: tuple[int, bytes] | None = None) -> pq.FileMetaData:
        """The footer of part file ``index``: on object storage from its last bytes, one request (two if large)."""
        path, size = self.part_paths[index], self._part_sizes[index]
        if self._fetches is None or not isinstance(size, int):
            with self._filesystem.open_input_file(path) as handle:
                return pq.ParquetFile(handle).metadata
        if tail is None:
            first = max(0, size - FOOTER_NBYTES)
            data = self._fs.cat_file(path, start=first, end=size)
        else:
            first, data = tail
        if len(data) >= 8 and data[-4:] == b"PAR1":
            needed = int.from_bytes(data[-8:-4], "little") + 8  # the footer, its length and the magic
            if len(data) < needed <= size:
                first = size - needed
                data = self._fs.cat_file(path, start=first, end=size)
        with pa.PythonFile(_FetchedFile([(first, data)]), mode="r") as handle:
            return pq.ParquetFile(handle).metadata

    def _read_groups(self, index: int, part: _Part, groups: list[int], pile: int | None) -> pa.Table:
        path = self.part_paths[index]

        def read(columns: list[str]) -> pa.Table:
            with self._filesystem.open_input_file(path) as handle:
                file = pq.ParquetFile(handle, metadata=part.footer, page_checksum_verification=True)
                return file.read_row_groups(groups, columns=columns)

        try:
            return read(self.columns)
        except (OSError, pa.ArrowException) as error:
            failing = []
            for column in self.columns:  # which columns: worth a second read on the way to an error
                try:
                    read([column])
                except (OSError, pa.ArrowException):
                    failing.append(column)
            raise self._corrupt(f"a part file that fails to read ({error})", path, pile, failing) from error

    def _pieces(self, start: int, stop: int, pile: int | None) -> list[_Piece]:
        """What rows ``start:stop`` are in: the part files and row groups, in row order; a missing one raises."""
        pieces = []
        position = start
        while position < stop:
            index = int(np.searchsorted(self.part_starts, position, side="right")) - 1
            if index < 0:
                path = f"{self._root}/{part_name(0)}"
                raise self._corrupt(
                    f"no part file holding rows {position}:{stop} (the first)", path, pile, self.columns
                )
            layout = self._layout(index, pile)
            first = int(self.part_starts[index])
            end = first + int(layout.group_starts[-1])
            if position >= end:
                following = f"{self._root}/{part_name(end)}"
                raise self._corrupt(
                    f"no part file holding rows {end}:{stop} (the next after {self.part_paths[index]!r})",
                    following,
                    pile,
                    self.columns,
                )
            a, b = position - first, min(stop, end) - first
            g0 = int(np.searchsorted(layout.group_starts, a, side="right")) - 1
            g1 = int(np.searchsorted(layout.group_starts, b, side="left"))
            pieces.append(_Piece(index, layout, a, b, list(range(g0, g1))))
            position = first + b
        return pieces

    def _read(self, start: int, stop: int, pile: int | None) -> pa.Table:
        pieces = self._pieces(start, stop, pile)
        if not pieces:
            return self._empty()
        fetched = self._take(start, stop, pieces)
        tables = []
        for piece, found in zip(pieces, fetched, strict=True):
            if found is None:
                table = self._read_groups(piece.file, self._part(piece.file, pile), piece.groups, pile)
            else:
                table = self._decode(piece, *found, pile)
            tables.append(table.slice(piece.a - int(piece.layout.group_starts[piece.groups[0]]), piece.b - piece.a))
        return concat(tables)

    def _empty(self) -> pa.Table:
        for index in range(len(self.part_paths)):
            try:
                schema = self._part(index, None).footer.schema.to_arrow_schema()
            except CorruptPileStoreError:
                continue
            return schema.empty_table().select(self.columns)
        raise CorruptPileStoreError(
            f"Expected at least one readable part file in the pile store {self.store!r}. Got none instead; "
            "shuffle the source again."
        )

    # -- fetching ahead (object storage) --------------------------------------
    @property
    def fetches(self) -> bool:  # type: ignore[override]
        """Whether the store is remote: the byte ranges of a read can be fetched ahead, many at once (:meth:`fetch`)."""
        return self._fetches is not None

    def fetch(self, start: int, stop: int) -> None:
        """Start fetching the column chunks of the row groups that hold rows ``start:stop``, all at once.

        Counts the bytes of the column chunks decoded (their uncompressed
        pages) against :attr:`fetched_nbytes`. Rows in a part file that is
        missing or unreadable are not fetched: their read reports it.
        """
        fetches = self._fetches
        stop = max(start, min(stop, self.n_rows))
        if fetches is None or stop == start or (start, stop) in fetches:
            return
        try:
            pieces = self._pieces(start, stop, None)
        except CorruptPileStoreError:
            return
        self._start(fetches, start, stop, pieces)

    def forget(self, start: int, stop: int) -> None:
        if self._fetches is not None:
            self._fetches.drop((start, max(start, min(stop, self.n_rows))))

    @property
    def fetched_nbytes(self) -> int:
        return 0 if self._fetches is None else self._fetches.nbytes

    def _start(self, fetches: Fetches, start: int, stop: int, pieces: list[_Piece]) -> list[list[Range]]:
        """Start fetching ``pieces``, the read of rows ``start:stop``; the byte ranges of each piece's column chunks.

        In a store of more part files than :data:`FOOTERS_KEPT`, whose footers
        come and go, each part file's footer is fetched with them.
        """
        planned = [self._ranges(piece) for piece in pieces]
        requests = [request for ranges, _ in planned for request in ranges]
        tails = [tail for piece in pieces if (tail := self._tail(piece.file)) is not None]
        fetches.start((start, stop), requests + tails, sum(nbytes for _, nbytes in planned))
        return [ranges for ranges, _ in planned]

    def _columns_read(self, footer: pq.FileMetaData) -> list[int]:
        """The Parquet (leaf) columns of the columns read: every column below each one's name."""
        if self._leaves is None:
            paths = [footer.schema.column(index).path for index in range(footer.num_columns)]
            self._leaves = [
                index
                for index, path in enumerate(paths)
                if any(path == name or path.startswith(name + ".") for name in self.columns)
            ]
        return self._leaves

    def _ranges(self, piece: _Piece) -> tuple[list[Range], int]:
        """The byte ranges of ``piece``'s column chunks (runs of them, cut at :data:`RANGE_NBYTES`), and their decoded bytes."""
        chunks = piece.layout.chunks[piece.groups[0] : piece.groups[-1] + 1].reshape(-1, 3)
        runs: list[list[int]] = []
        for first, end in sorted(chunks[:, :2].tolist()):
            if runs and first <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], end)
            else:
                runs.append([first, end])
        path = self.part_paths[piece.file]
        ranges = [
            (path, cut, min(cut + RANGE_NBYTES, end)) for first, end in runs for cut in range(first, end, RANGE_NBYTES)
        ]
        return ranges, int(chunks[:, 2].sum())

    def _tail(self, index: int) -> Range | None:
        """The footer's bytes at the end of part file ``index``, where reads fetch it (else ``None``)."""
        size, layout = self._part_sizes[index], self._layouts[index]
        if len(self.part_paths) <= FOOTERS_KEPT or not isinstance(size, int) or layout is None:
            return None  # every footer is kept: read when the store was opened
        return self.part_paths[index], max(0, size - layout.footer_nbytes), size

    def _take(self, start: int, stop: int, pieces: list[_Piece]) -> list[tuple[list[Fetched], Fetched | None] | None]:
        """Each piece's fetched column chunks and footer (if fetched), the fetches started now if the loader did not.

        ``None`` for a piece whose column chunks are not all there.
        """
        fetches = self._fetches
        if fetches is None:
            return [None] * len(pieces)
        key = (start, stop)
        # Started again here (a no-op if the loader did): the ranges to take are those of this read's plan.
        planned = self._start(fetches, start, stop, pieces)
        found: list[tuple[list[Fetched], Fetched | None] | None] = []
        for piece, ranges in zip(pieces, planned, strict=True):
            taken = [(request, fetches.take(key, request)) for request in ranges]
            complete = [(request, future) for request, future in taken if future is not None]
            tail = self._tail(piece.file)
            footer = None if tail is None else fetches.take(key, tail)
            fetched_footer = None if tail is None or footer is None else (tail, footer)
            # A range missing: taken by a read of the same rows at the same time, or forgotten. Read the file.
            found.append((complete, fetched_footer) if len(complete) == len(taken) else None)
        fetches.drop(key)  # what no piece took
        return found

    def _decode(self, piece: _Piece, ranges: list[Fetched], tail: Fetched | None, pile: int | None) -> pa.Table:
        """The row groups of ``piece`` from their fetched bytes, with the page checksums checked.

        The footer is the one kept, or else the one fetched (``tail``), or else
        read again. If anything fails (a request, a short range, a page), the
        part file is read again without fetching: that gives the rows if the
        fetch alone failed, and otherwise the error such a read gives, with the
        columns that fail.
        """
        try:
            with self._lock:
                part = self._parts.get(piece.file)
            if part is None and tail is not None:
                # The footer and its trailer after the leading magic: a file pyarrow reads the footer of.
                footer = pq.ParquetFile(pa.BufferReader(b"PAR1" + _bytes_of(tail)[1])).metadata
                part = self._keep(piece.file, footer)
            if part is None:
                part = self._part(piece.file, pile)
            with pa.PythonFile(_FetchedFile([_bytes_of(found) for found in ranges]), mode="r") as handle:
                # Without pre_buffer, which coalesces the column chunks read across the gaps between them
                # (columns not read) into reads of bytes not fetched: each column chunk is one read, no copy.
                file = pq.ParquetFile(handle, metadata=part.footer, page_checksum_verification=True, pre_buffer=False)
                return file.read_row_groups(piece.groups, columns=self.columns)
        except (Exception, CancelledError):
            return self._read_groups(piece.file, self._part(piece.file, pile), piece.groups, pile)

    def read_rows(self, start: int, stop: int) -> pa.Table:
        return self._read(start, stop, None)

    def read_pile(self, pile: int) -> pa.Table:
        offsets = self.pile_offsets
        return self._read(int(offsets[pile]), int(offsets[pile + 1]), pile)

    def close(self) -> None:
        if self._fetches is not None:
            self._fetches.clear()
        with self._lock:
            self._parts.clear()

    # -- rows in memory --------------------------------------------------------
    def take(self, rows: pa.Table, index: NDArray[np.intp]) -> pa.Table:
        return take(rows, index)

    def concat(self, parts: Sequence[pa.Table]) -> pa.Table:
        return concat(parts)

    def n_rows_of(self, rows: pa.Table) -> int:
        return int(rows.num_rows)

    def as_arrays(self, rows: pa.Table) -> dict[str, NDArray[Any]] | None:
        nested = [rows.column(index) for index, field in enumerate(rows.schema) if _is_nested(field.type)]
        if self.batch_format != "numpy" or any(_row_shape(column) is None for column in nested):
            # Nested values become numpy views into the whole pile: gathered from, a batch would
            # keep the pile alive. Taken first, as Arrow, they are views into the batch only.
            return None
        # Read-only views where Arrow allows: batches are gathered from them into new arrays.
        return {name: _to_numpy(rows.column(name), writeable=False) for name in rows.column_names}

    def to_batch(self, rows: pa.Table) -> Any:
        if self.batch_format == "arrow":
            return (
                rows.combine_chunks().to_batches()[0]
                if rows.num_rows
                else pa.RecordBatch.from_pylist([], schema=rows.schema)
            )
        if self.batch_format == "pandas":
            return rows.to_pandas()
        return {name: _to_numpy(rows.column(name)) for name in rows.column_names}


def _bytes_of(fetched: Fetched) -> tuple[int, bytes]:
    """Where a fetched range starts, and its bytes (all of them: a short read raises ``OSError``)."""
    (_, first, end), future = fetched
    data = future.result()
    if len(data) != end - first:
        raise OSError(f"{len(data):,} bytes at {first:,} instead of {end - first:,}")
    return first, data


def _is_nested(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return _is_nested(kind.value_type)
    return bool(pa.types.is_nested(kind))


def _row_shape(column: pa.ChunkedArray) -> tuple[int, ...] | None:
    """The shape of a row of ``column`` as a dense array: ``()`` for numbers, ``(n, ...)`` for fixed-size lists.

    ``None`` for anything else, and for fixed-size lists with a null at any level.
    """
    kind, shape = column.type, []
    while pa.types.is_fixed_size_list(kind):
        if column.null_count:
            return None
        shape.append(kind.list_size)
        column = pa.chunked_array([chunk.flatten() for chunk in column.chunks], type=kind.value_type)
        kind = kind.value_type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        return None
    return tuple(shape) if not shape or not column.null_count else None


def _to_numpy(column: pa.ChunkedArray, writeable: bool = True) -> NDArray[Any]:
    kind = column.type
    if pa.types.is_fixed_size_list(kind) and (shape := _row_shape(column)) is not None:
        # An embedding: one array of one more dimension, rather than an object array of arrays.
        n_rows = len(column)
        while pa.types.is_fixed_size_list(column.type):
            column = pa.chunked_array([chunk.flatten() for chunk in column.chunks], type=column.type.value_type)
        return _to_numpy(column, writeable).reshape(n_rows, *shape)
    if pa.types.is_dictionary(kind):
        column = column.cast(kind.value_type)
    values: NDArray[Any] = column.to_numpy(zero_copy_only=False)
    # Arrow hands out read-only views; a batch is the user's to modify (torch.from_numpy needs that).
    return values.copy() if writeable and not values.flags.writeable else values
