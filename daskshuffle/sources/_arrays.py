"""Rows that are numpy arrays: their piece files, and what the Zarr and xarray formats share (:class:`ArrayFormat`).

Pieces are raw little-endian bytes, one file per (variable, block), written once and read once by byte range: no
codec, no chunk boundary. On object storage a piece file is cut into parts of ``shuffle.part-nbytes``, written at
once; a part's name holds that size, so a shuffle resumed with another size never misreads an earlier part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._threads import each
from ..formats import ArrayRows, ArrayRowsMethods, Pieces, Variable
from ..pilestore import ZarrDestination
from ..storage import Location, bounded

__all__ = ["ArrayFormat"]


def _from_bytes(data: bytes, variable: Variable) -> NDArray[Any]:
    return np.frombuffer(data, dtype=variable.dtype).reshape(-1, *variable.row_shape)


class ArrayFormat(ArrayRowsMethods, Pieces[ArrayRows], ZarrDestination):
    """What the Zarr and xarray formats share: arrays of ``variables``, their pieces and the Zarr pile store."""

    kind: ClassVar[str] = "zarr"

    def __init__(
        self,
        *,
        variables: list[Variable],
        source_names: list[str],
        identity: list[dict[str, Any]],
        identify: Callable[[], list[dict[str, Any]]] | None = None,
        group_attrs: dict[str, Any],
        chunk_rows: int | None,
        compressors: Any,
    ) -> None:
        self.variables = variables
        self.row_nbytes = sum(variable.row_nbytes for variable in variables)
        self.source_names = source_names
        self.identity = identity
        self.identify = identify
        self.group_attrs = group_attrs
        #: Bytes of a part of a piece file on object storage: the same for the task that writes it and those that
        #: read it.
        self.part_nbytes = int_setting("shuffle.part-nbytes")
        self.chunk_rows = chunk_rows
        self.compressors = compressors

    def slice(self, rows: ArrayRows, start: int, stop: int) -> ArrayRows:
        return {name: values[start:stop] for name, values in rows.items()}

    def _part_rows(self, variable: Variable) -> int:
        """Rows of ``variable`` in a part of a piece file on object storage."""
        return max(1, self.part_nbytes // max(variable.row_nbytes, 1))

    def _piece_path(self, root: str, variable: Variable, block: int, part: int | None = None) -> str:
        # Named by numbers only: a variable's name comes from the source, and is no path.
        name = block if part is None else f"{block}.{self.part_nbytes}.{part}"
        return f"{root}/{self.variables.index(variable)}/{name}.bin"

    def prepare_pieces(self, tmp: Location) -> None:
        for index in range(len(self.variables)):
            tmp.join(str(index)).makedirs()

    def write_pieces(self, tmp: Location, block: int, rows: ArrayRows, piece_offsets: NDArray[np.int64]) -> None:
        self.scatter_block(tmp, block, rows, np.arange(self.n_rows_of(rows), dtype=np.intp), piece_offsets)

    def scatter_block(
        self, tmp: Location, block: int, rows: ArrayRows, order: NDArray[np.intp], piece_offsets: NDArray[np.int64]
    ) -> None:
        # Reorder and write a run at a time: the block is never held twice.
        for variable in self.variables:
            self._write_piece_file(tmp, variable, block, rows[variable.name], order)

    def _write_piece_file(
        self, tmp: Location, variable: Variable, block: int, values: NDArray[Any], order: NDArray[np.intp]
    ) -> None:
        """Write ``values`` of ``variable`` in block ``block`` taken at ``order``, a run at a time: one file on a
        local disk, parts written ``shuffle.parts-at-once`` at once on object storage, each put within the request
        deadline."""
        fs, root, n_rows = tmp.fs, tmp.path, len(order)

        def rows_of(first: int, last: int) -> NDArray[Any]:
            return np.ascontiguousarray(np.take(values, order[first:last], axis=0))

        if tmp.is_local:
            run = max(1, int_setting("shuffle.run-nbytes") // max(variable.row_nbytes, 1))
            with fs.open(self._piece_path(root, variable, block), "wb") as file:
                for first in range(0, n_rows, run):
                    data = rows_of(first, min(first + run, n_rows))
                    file.write(data.reshape(-1).view(np.uint8))
            return
        part_rows = self._part_rows(variable)

        def put(part: int) -> None:
            first = part * part_rows
            data = rows_of(first, min(first + part_rows, n_rows))
            path = self._piece_path(root, variable, block, part)
            bounded(fs, "pipe_file", path, data.reshape(-1).view(np.uint8).tobytes(), what=path)

        each(put, range(-(-n_rows // part_rows)), int_setting("shuffle.parts-at-once"))

    def _piece_ranges(
        self, tmp: Location, variable: Variable, block: int, start: int, stop: int
    ) -> list[tuple[str, int, int]]:
        """The byte ranges of the files that hold rows ``start:stop`` of ``variable`` in block ``block``."""
        size, root = variable.row_nbytes, tmp.path
        if tmp.is_local:
            return [(self._piece_path(root, variable, block), start * size, stop * size)]
        part_rows = self._part_rows(variable)
        ranges = []
        for part in range(start // part_rows, -(-stop // part_rows)):
            first = part * part_rows
            lo, hi = max(start, first) - first, min(stop, first + part_rows) - first
            ranges.append((self._piece_path(root, variable, block, part), lo * size, hi * size))
        return ranges

    def read_pieces(self, tmp: Location, block: int, start: int, stop: int) -> ArrayRows:
        return self.gather_pieces(tmp, [(block, start, stop)], np.arange(stop - start, dtype=np.intp))

    def gather_pieces(self, tmp: Location, reads: Sequence[tuple[int, int, int]], order: NDArray[np.intp]) -> ArrayRows:
        # Each read lands straight in its final rows: one copy of the group in
        # memory, not a concatenation to reorder.
        destination = np.empty(len(order), dtype=np.intp)
        destination[order] = np.arange(len(order), dtype=np.intp)
        fetched = None if tmp.is_local else self._fetch_pieces(tmp, reads)
        rows = {}
        for variable in self.variables:
            values = np.empty((len(order), *variable.row_shape), dtype=variable.dtype)
            filled = 0
            for block, start, stop in reads:
                if fetched is None:  # one file on a local disk
                    [(path, lo, hi)] = self._piece_ranges(tmp, variable, block, start, stop)
                    part = _from_bytes(tmp.fs.cat_file(path, start=lo, end=hi) if hi > lo else b"", variable)
                else:
                    part = _from_bytes(fetched.get((variable.name, block, start), b""), variable)
                values[destination[filled : filled + len(part)]] = part
                filled += len(part)
            rows[variable.name] = values
        return rows

    def _fetch_pieces(self, tmp: Location, reads: Sequence[tuple[int, int, int]]) -> dict[tuple[str, int, int], bytes]:
        """Every piece read of every variable in one call (within the request deadline): an object store serves them
        all at once."""
        keys: list[tuple[str, int, int]] = []
        ranges: list[tuple[str, int, int]] = []
        counts: list[int] = []
        for variable in self.variables:
            for block, start, stop in reads:
                if stop > start:
                    keys.append((variable.name, block, start))
                    found = self._piece_ranges(tmp, variable, block, start, stop)
                    ranges += found
                    counts.append(len(found))
        if not ranges:
            return {}
        paths, starts, ends = (list(column) for column in zip(*ranges, strict=True))
        results = bounded(tmp.fs, "cat_ranges", paths, starts, ends, on_error="return", what=f"the pieces in {tmp.url}")
        for path, read in zip(paths, results, strict=True):  # the first error among the reads, as an OSError
            if isinstance(read, BaseException):
                raise read if isinstance(read, OSError) else OSError(f"Could not read piece {path!r}: {read}")
        data = iter(results)
        return {key: b"".join(next(data) for _ in range(count)) for key, count in zip(keys, counts, strict=True)}
