"""The part files of a Parquet pile store: where each one's rows are, its footer, and its rows read directly.

The files are listed once; a file's footer is read when its rows are first
needed (or all of them when the store is opened, to check it); the last
``parquet-reader.footers-kept`` footers are kept, and a few integers per column
chunk (its :class:`Layout`) for every file.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from fsspec.implementations.local import LocalFileSystem
from numpy.typing import NDArray

from .._config import int_setting
from .._errors import CorruptPileStoreError
from ..formats import FetchedFile, Range, column_chunk_bytes, read_footer
from ..pilestore import PART, PART_BINDING, arrow_filesystem, part_name
from ..storage import Location, bounded, raise_storage_failure

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["Layout", "PartFiles", "Piece"]


class Layout(NamedTuple):
    """What planning a read of a part file needs, kept for every part file once its footer was read."""

    #: The first row of each row group (and the end).
    group_starts: NDArray[np.int64]
    #: Of each row group (axis 0) and column read (axis 1): first byte, end byte and decoded bytes of its column chunk
    #: (no columns for a local store).
    chunks: NDArray[np.int64]
    #: Bytes at the end of the file that hold the footer, its length and the magic.
    footer_nbytes: int


class Piece(NamedTuple):
    """Rows ``a:b`` (from its first row) of part file ``file`` that a read needs, in row groups ``groups``."""

    file: int
    layout: Layout
    a: int
    b: int
    groups: list[int]


class PartFiles:
    """The part files of a Parquet pile store; safe to share between threads (a part file is opened for each read).

    A damaged part file raises :class:`~daskshuffle.CorruptPileStoreError`
    naming the file, and the pile and columns where known.
    """

    store: str
    #: The run that wrote the store, which every part file's footer names with its first row.
    run: str

    def _open_parts(self, location: Location, columns: list[str]) -> None:
        """List the part files of ``location``, whose ``columns`` are read."""
        self.columns = columns
        self._filesystem, root = arrow_filesystem(location)
        fs = location.fs
        parts = sorted(
            (int(match.group(1)), entry["name"], entry.get("size"))
            for entry in bounded(fs, "ls", root, detail=True, what="the listing of the part files")
            if (match := PART.fullmatch(entry["name"].rsplit("/", 1)[-1]))
        )
        self.part_starts = np.asarray([start for start, _, _ in parts], dtype=np.int64)
        self.part_paths = [path for _, path, _ in parts]
        self._part_sizes = [size for _, _, size in parts]  # as listed: a remote footer is read with one request
        self._fs = fs
        self._root = root
        self._parts: OrderedDict[int, pq.FileMetaData] = OrderedDict()
        self._footers_kept = int_setting("parquet-reader.footers-kept")
        self._lock = threading.Lock()
        #: Elsewhere reads fetch byte ranges, and footers are read from a file's last bytes.
        self.local = isinstance(fs, LocalFileSystem)
        self._leaves: list[int] | None = None  # the Parquet columns of the columns read
        self._layouts: list[Layout | None] = [None] * len(self.part_paths)
        #: The columns read, as the first footer read types them (the first part's, read first): every other part must agree.
        self._schema: tuple[int, pa.Schema] | None = None

    def _corrupt(self, what: str, path: str, pile: int | None, columns: Sequence[str] | None = None) -> Exception:
        about = [f"pile {pile}"] if pile is not None else []
        about += [f"columns {list(columns)}"] if columns else []
        return CorruptPileStoreError(
            f"Expected intact part files in the pile store {self.store!r}. Got {what} in file {path!r}"
            f"{' (' + ', '.join(about) + ')' if about else ''} instead; shuffle the source again, or restore the file."
        )

    def _part(self, index: int, pile: int | None, tail: tuple[int, bytes] | None = None) -> pq.FileMetaData:
        """Part file ``index``'s footer, kept or read (from ``tail``, its last bytes, where given)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        with self._lock:
            part = self._parts.get(index)
            if part is not None:
                self._parts.move_to_end(index)
                return part
        path, size = self.part_paths[index], self._part_sizes[index]
        try:
            if self.local:
                with self._filesystem.open_input_file(path) as handle:
                    footer = pq.ParquetFile(handle).metadata
            else:  # on object storage from its last bytes: one request (two if large), and one for a size not listed
                size = size if isinstance(size, int) else int(bounded(self._fs, "size", path, what=path))
                footer = read_footer(self._fs, path, size, tail)
        except (OSError, pa.ArrowException) as error:
            raise_storage_failure(error, self.store, what=path)  # not served: nothing is damaged
            raise self._corrupt(f"a part file whose footer cannot be read ({error})", path, pile) from error
        return self._keep(index, footer)

    def _keep(self, index: int, footer: pq.FileMetaData) -> pq.FileMetaData:
        """Keep ``footer`` of part file ``index`` (among the last few), and its layout for good, once checked.

        The footer must name this store's run and this first row, and the
        first footer's columns: a file moved, left over or of another store is refused.
        """
        self._check_binding(index, footer)
        self._check_schema(index, footer)
        layout = self._layouts[index] or self._layout_of(footer)
        with self._lock:
            self._layouts[index] = layout
            self._parts[index] = footer
            self._parts.move_to_end(index)
            while len(self._parts) > self._footers_kept:
                self._parts.popitem(last=False)
        return footer

    def _check_binding(self, index: int, footer: pq.FileMetaData) -> None:
        found = (footer.metadata or {}).get(PART_BINDING)
        try:
            binding = json.loads(found) if found is not None else None
        except ValueError:
            binding = None
        expected = {"run": self.run, "first_row": int(self.part_starts[index])}
        if binding != expected:
            raise self._corrupt(
                f"a part file of {'no run' if binding is None else binding} where the store's run wrote {expected}"
                " (a file of another place, run or store)",
                self.part_paths[index],
                None,
            )

    def _check_schema(self, index: int, footer: pq.FileMetaData) -> None:
        import pyarrow as pa

        try:
            whole = footer.schema.to_arrow_schema()
        except (pa.ArrowException, ValueError) as error:
            raise self._corrupt(
                f"a footer whose schema cannot be read ({error})", self.part_paths[index], None
            ) from error
        names = set(whole.names)
        schema = pa.schema([whole.field(name) for name in self.columns if name in names])
        with self._lock:
            if self._schema is None:
                self._schema = (index, schema)
            first, expected = self._schema
        if len(schema) != len(self.columns) or not schema.equals(expected):
            missing = [name for name in self.columns if name not in names]
            got = f"columns {missing} missing" if missing else f"columns of other types ({_types(schema)})"
            raise self._corrupt(
                f"{got} where part file {self.part_paths[first]!r} has {_types(expected)}",
                self.part_paths[index],
                None,
                self.columns,
            )

    def _layout_of(self, footer: pq.FileMetaData) -> Layout:
        sizes = [footer.row_group(group).num_rows for group in range(footer.num_row_groups)]
        # Byte ranges only where reads fetch them: a local store's open does not pay for them.
        leaves = self._columns_read(footer) if not self.local else []
        chunks = np.zeros((footer.num_row_groups, len(leaves), 3), dtype=np.int64)
        for group in range(footer.num_row_groups):
            row_group = footer.row_group(group)
            for position, leaf in enumerate(leaves):
                column = row_group.column(leaf)
                chunks[group, position] = (*column_chunk_bytes(column), column.total_uncompressed_size)
        group_starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        return Layout(group_starts, chunks, footer.serialized_size + 8)

    def _layout(self, index: int, pile: int | None, tail: tuple[int, bytes] | None = None) -> Layout:
        """The layout of part file ``index``, from its footer (read if it never was, from ``tail`` where given)."""
        layout = self._layouts[index]
        if layout is None:
            self._part(index, pile, tail)
            layout = self._layouts[index]
            assert layout is not None
        return layout

    def _read_groups(
        self, index: int, groups: list[int], pile: int | None, fetched: list[tuple[int, bytes]] | None = None
    ) -> pa.Table:
        """Row groups ``groups`` of part file ``index``, from the file, or from its ``fetched`` byte ranges (start, bytes).

        A failure reads each column again, to name those that fail.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        path, footer = self.part_paths[index], self._part(index, pile)

        def read(columns: list[str]) -> pa.Table:
            opened = (
                self._filesystem.open_input_file(path)
                if fetched is None
                else pa.PythonFile(FetchedFile(fetched), mode="r")
            )
            with opened as handle:
                file = pq.ParquetFile(handle, metadata=footer, page_checksum_verification=True)
                return file.read_row_groups(groups, columns=columns)

        try:
            return read(self.columns)
        except (OSError, pa.ArrowException) as error:
            raise_storage_failure(error, self.store, what=path)  # not served: nothing is damaged
            failing = []
            for column in self.columns:  # which columns: worth a second read on the way to an error
                try:
                    read([column])
                except (OSError, pa.ArrowException):
                    failing.append(column)
            raise self._corrupt(f"a part file that fails to read ({error})", path, pile, failing) from error

    def _pieces(self, start: int, stop: int, pile: int | None) -> list[Piece]:
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
            pieces.append(Piece(index, layout, a, b, list(range(g0, g1))))
            position = first + b
        return pieces

    def _empty(self) -> pa.Table:
        for index in range(len(self.part_paths)):
            try:
                schema = self._part(index, None).schema.to_arrow_schema()
            except CorruptPileStoreError:
                continue
            return schema.empty_table().select(self.columns)
        raise CorruptPileStoreError(
            f"Expected at least one readable part file in the pile store {self.store!r}. Got none instead; "
            "shuffle the source again."
        )

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

    def _tail(self, index: int) -> Range | None:
        """The footer's bytes at the end of part file ``index``, where reads fetch it (else ``None``)."""
        size, layout = self._part_sizes[index], self._layouts[index]
        if len(self.part_paths) <= self._footers_kept or not isinstance(size, int) or layout is None:
            return None  # every footer is kept: read when the store was opened
        return self.part_paths[index], max(0, size - layout.footer_nbytes), size


def _types(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in schema)
