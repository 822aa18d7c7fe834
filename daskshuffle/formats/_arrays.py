"""Rows as numpy arrays, shared by the Zarr and xarray formats: the rows in memory and the piece files.

Rows are a ``dict`` of numpy arrays keyed by variable name, all of the same
length. Every variable is shuffled with one permutation, so the rows of ``x``,
``y`` and ``id`` stay aligned.

Pieces are raw little-endian bytes, one file per (variable, block): pass 1
writes a block's rows in piece order with one sequential write, and the merge
reads exactly the byte range of the piles it assembles. No codec runs on data
that is written once and read once, and no chunk boundary forces a read of
rows that are not needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..storage._location import Location
from ._base import Pieces

__all__ = ["RUN_NBYTES", "ArrayPieces", "ArrayRows", "Variable", "concat_rows", "take_rows"]

ArrayRows = dict[str, NDArray[Any]]
#: Pass 1 and the merge read, reorder and write in runs of about this size, so
#: that the buffers of a run stay small next to the block or group they hold.
RUN_NBYTES = 16 * 2**20


@dataclass(frozen=True)
class Variable:
    """What the destination needs to know about one shuffled array."""

    name: str
    dtype: np.dtype[Any]
    row_shape: tuple[int, ...]
    fill_value: Any
    attributes: dict[str, Any]
    dimension_names: tuple[str | None, ...] | None

    @property
    def row_nbytes(self) -> int:
        return int(self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64)))


def take_rows(rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
    return {name: np.take(values, index, axis=0) for name, values in rows.items()}


def concat_rows(parts: Sequence[ArrayRows]) -> ArrayRows:
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


class ArrayRowsMethods:
    """``take``, ``concat`` and ``n_rows_of`` of a pile reader whose rows are a dict of numpy arrays."""

    def take(self, rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
        return take_rows(rows, index)

    def concat(self, parts: Sequence[ArrayRows]) -> ArrayRows:
        return concat_rows(parts)

    def n_rows_of(self, rows: ArrayRows) -> int:
        return len(next(iter(rows.values()))) if rows else 0


def _from_bytes(data: bytes, variable: Variable) -> NDArray[Any]:
    return np.frombuffer(data, dtype=variable.dtype).reshape(-1, *variable.row_shape)


class ArrayPieces(Pieces[ArrayRows]):
    """Rows in memory and piece files for formats whose rows are arrays of ``variables``."""

    variables: list[Variable]

    def take(self, rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
        return take_rows(rows, index)

    def concat(self, parts: Sequence[ArrayRows]) -> ArrayRows:
        return concat_rows(parts)

    def slice(self, rows: ArrayRows, start: int, stop: int) -> ArrayRows:
        return {name: values[start:stop] for name, values in rows.items()}

    def _piece_path(self, root: str, variable: Variable, block: int) -> str:
        # Named by numbers only: a variable's name comes from the source, and is no path.
        return f"{root}/{self.variables.index(variable)}/{block}.bin"

    def prepare_pieces(self, tmp: Location) -> None:
        fs, root = tmp.fs, tmp.path
        for variable in self.variables:
            fs.makedirs(f"{root}/{self.variables.index(variable)}", exist_ok=True)

    def write_pieces(self, tmp: Location, block: int, rows: ArrayRows, piece_offsets: NDArray[np.int64]) -> None:
        fs, root = tmp.fs, tmp.path
        for variable in self.variables:
            with fs.open(self._piece_path(root, variable, block), "wb") as file:
                file.write(np.ascontiguousarray(rows[variable.name]).reshape(-1).view(np.uint8))

    def scatter_block(
        self, tmp: Location, block: int, rows: ArrayRows, order: NDArray[np.intp], piece_offsets: NDArray[np.int64]
    ) -> None:
        # Reorder and write a run at a time: the block is never held twice.
        fs, root = tmp.fs, tmp.path
        for variable in self.variables:
            values = rows[variable.name]
            run = max(1, RUN_NBYTES // max(variable.row_nbytes, 1))
            with fs.open(self._piece_path(root, variable, block), "wb") as file:
                for first in range(0, len(order), run):
                    file.write(np.take(values, order[first : first + run], axis=0).reshape(-1).view(np.uint8))

    def _read_piece_rows(
        self, fs: Any, root: str, variable: Variable, block: int, start: int, stop: int
    ) -> NDArray[Any]:
        size = variable.row_nbytes
        if stop <= start:
            return _from_bytes(b"", variable)
        # By keyword: s3fs's cat_file takes a version id as its second positional argument.
        data = fs.cat_file(self._piece_path(root, variable, block), start=start * size, end=stop * size)
        return _from_bytes(data, variable)

    def read_pieces(self, tmp: Location, block: int, start: int, stop: int) -> ArrayRows:
        fs, root = tmp.fs, tmp.path
        return {
            variable.name: self._read_piece_rows(fs, root, variable, block, start, stop) for variable in self.variables
        }

    def gather_pieces(self, tmp: Location, reads: Sequence[tuple[int, int, int]], order: NDArray[np.intp]) -> ArrayRows:
        # Each read lands straight in its final rows: one copy of the group in
        # memory, not a concatenation to reorder.
        destination = np.empty(len(order), dtype=np.intp)
        destination[order] = np.arange(len(order), dtype=np.intp)
        fs, root = tmp.fs, tmp.path
        fetched = None if tmp.is_local else self._fetch_pieces(fs, root, reads)
        rows = {}
        for variable in self.variables:
            values = np.empty((len(order), *variable.row_shape), dtype=variable.dtype)
            filled = 0
            for block, start, stop in reads:
                if fetched is None:
                    part = self._read_piece_rows(fs, root, variable, block, start, stop)
                else:
                    part = _from_bytes(fetched.get((variable.name, block, start), b""), variable)
                values[destination[filled : filled + len(part)]] = part
                filled += len(part)
            rows[variable.name] = values
        return rows

    def _fetch_pieces(
        self, fs: Any, root: str, reads: Sequence[tuple[int, int, int]]
    ) -> dict[tuple[str, int, int], bytes]:
        """Every piece read of every variable in one call: an object store serves them all at once."""
        keys, paths, starts, ends = [], [], [], []
        for variable in self.variables:
            size = variable.row_nbytes
            for block, start, stop in reads:
                if stop > start:
                    keys.append((variable.name, block, start))
                    paths.append(self._piece_path(root, variable, block))
                    starts.append(start * size)
                    ends.append(stop * size)
        found = fs.cat_ranges(paths, starts, ends, on_error="return")
        for path, data in zip(paths, found, strict=True):
            if isinstance(data, BaseException):
                raise data if isinstance(data, OSError) else OSError(f"Could not read piece {path!r}: {data}")
        return dict(zip(keys, found, strict=True))
