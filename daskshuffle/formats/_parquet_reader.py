"""Reading a Parquet pile store: lazily, from several threads at once, checked.

The store is what ``ArrowFormat`` writes (:mod:`daskshuffle.formats._parquet`):
part files ``part-<first row>.parquet`` of whole piles, a row group per pile,
with page checksums, and the shuffle's metadata in ``_daskshuffle.json``.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from numpy.typing import NDArray

from .._errors import CorruptPileStoreError, DaskShuffleValueError, IncompletePileStoreError, SourceNotFoundError
from ..storage._paths import exists, filesystem, normalize
from ._base import PileReader, check_pile_metadata, check_recorded_rows, metadata_disagrees, select_variables
from ._parquet_store import METADATA_FILE, PART, arrow_filesystem, concat, part_name, take

__all__ = ["FOOTERS_KEPT", "ParquetPileReader", "read_metadata"]


# -- reading a pile store ---------------------------------------------------------------
def read_metadata(store: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sidecar of a Parquet pile store, checked to be complete and of this format version."""
    where = os.fspath(store)
    if not exists(where, storage_options):
        raise SourceNotFoundError(f"Expected an existing pile store. Got {where!r}, which does not exist, instead.")
    fs, root = filesystem(where, storage_options)
    try:
        with fs.open(f"{root}/{METADATA_FILE}", "r") as file:
            metadata = json.load(file)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError) as error:
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


class _Part(NamedTuple):
    """A part file's footer and the first row of each of its row groups (and the end)."""

    footer: pq.FileMetaData
    group_starts: NDArray[np.int64]


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
    part files used are kept. Every read checks what it reads: page checksums
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
        store: str | os.PathLike[str],
        variables: Sequence[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        batch_format: str = "numpy",
    ) -> None:
        self.store = os.fspath(store)
        self.metadata = read_metadata(self.store, storage_options)
        names = select_variables(self.metadata, variables)
        if batch_format not in ("numpy", "arrow", "pandas"):
            raise DaskShuffleValueError(
                f"Expected batch_format to be 'numpy', 'arrow' or 'pandas'. Got {batch_format!r} instead."
            )
        self.columns = names
        self.batch_format = batch_format
        self._filesystem, root = arrow_filesystem(self.store, storage_options)
        fs, _ = filesystem(self.store, storage_options)
        parts = sorted(
            (int(match.group(1)), path)
            for path in fs.ls(root, detail=False)
            if (match := PART.fullmatch(path.rsplit("/", 1)[-1]))
        )
        self.part_starts = np.asarray([start for start, _ in parts], dtype=np.int64)
        self.part_paths = [path for _, path in parts]
        self._root = root
        self._parts: OrderedDict[int, _Part] = OrderedDict()
        self._lock = threading.Lock()
        self._check_parts(1 if isinstance(fs, LocalFileSystem) else FOOTER_THREADS)

    def _check_parts(self, threads: int) -> None:
        """Check the sidecar against itself and against the part files' rows, from their footers (no data is read).

        A part file whose footer cannot be read, or a gap between part files or
        after the last (a missing one), is reported when its rows are read, so
        that a reader of other rows is not stopped by it; the part files that
        can be read must still end within the store's rows. Otherwise they must
        hold exactly the store's rows.
        """

        def n_rows(index: int) -> int | None:
            try:
                return int(self._part(index, None).group_starts[-1])
            except CorruptPileStoreError:
                return None

        indices = range(len(self.part_paths))
        if threads > 1 and len(indices) > 1:
            with ThreadPoolExecutor(min(threads, len(indices)), thread_name_prefix="daskshuffle-footers") as pool:
                counts = list(pool.map(n_rows, indices))
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
    def recognizes(cls, store: str, storage_options: dict[str, Any] | None = None) -> bool:
        return exists(f"{normalize(store)}/{METADATA_FILE}", storage_options)

    # -- reading, checked ------------------------------------------------------
    def _corrupt(self, what: str, path: str, pile: int | None, columns: Sequence[str] | None = None) -> Exception:
        about = [f"pile {pile}"] if pile is not None else []
        about += [f"columns {list(columns)}"] if columns else []
        return CorruptPileStoreError(
            f"Expected intact part files in the pile store {self.store!r}. Got {what} in file {path!r}"
            f"{' (' + ', '.join(about) + ')' if about else ''} instead; shuffle the source again, or restore the file."
        )

    def _part(self, index: int, pile: int | None) -> _Part:
        with self._lock:
            part = self._parts.get(index)
            if part is not None:
                self._parts.move_to_end(index)
                return part
        path = self.part_paths[index]
        try:
            with self._filesystem.open_input_file(path) as handle:
                footer = pq.ParquetFile(handle).metadata
        except (OSError, pa.ArrowException) as error:
            raise self._corrupt(f"a part file whose footer cannot be read ({error})", path, pile) from error
        sizes = [footer.row_group(group).num_rows for group in range(footer.num_row_groups)]
        part = _Part(footer, np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64))
        with self._lock:
            self._parts[index] = part
            while len(self._parts) > FOOTERS_KEPT:
                self._parts.popitem(last=False)
        return part

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

    def _read(self, start: int, stop: int, pile: int | None) -> pa.Table:
        tables = []
        position = start
        while position < stop:
            index = int(np.searchsorted(self.part_starts, position, side="right")) - 1
            if index < 0:
                path = f"{self._root}/{part_name(0)}"
                raise self._corrupt(
                    f"no part file holding rows {position}:{stop} (the first)", path, pile, self.columns
                )
            part = self._part(index, pile)
            first = int(self.part_starts[index])
            end = first + int(part.group_starts[-1])
            if position >= end:
                following = f"{self._root}/{part_name(end)}"
                raise self._corrupt(
                    f"no part file holding rows {end}:{stop} (the next after {self.part_paths[index]!r})",
                    following,
                    pile,
                    self.columns,
                )
            a, b = position - first, min(stop, end) - first
            g0 = int(np.searchsorted(part.group_starts, a, side="right")) - 1
            g1 = int(np.searchsorted(part.group_starts, b, side="left"))
            table = self._read_groups(index, part, list(range(g0, g1)), pile)
            tables.append(table.slice(a - int(part.group_starts[g0]), b - a))
            position = first + b
        if not tables:
            return self._empty()
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

    def read_rows(self, start: int, stop: int) -> pa.Table:
        return self._read(start, stop, None)

    def read_pile(self, pile: int) -> pa.Table:
        offsets = self.pile_offsets
        return self._read(int(offsets[pile]), int(offsets[pile + 1]), pile)

    def close(self) -> None:
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
