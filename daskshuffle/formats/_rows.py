"""Rows as numpy arrays: a ``dict`` of arrays keyed by variable name, all of the same length, and reading rows of a
Zarr array in runs of whole chunks (so that zarr's buffers stay small next to the result).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ..plan import block_rows

if TYPE_CHECKING:
    import zarr

__all__ = ["ArrayRows", "ArrayRowsMethods", "Variable", "read_in_runs", "run_rows"]

ArrayRows = dict[str, NDArray[Any]]


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


class ArrayRowsMethods:
    """What pieces and pile readers do with rows that are a dict of numpy arrays; a batch of them is the rows."""

    def take(self, rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
        return {name: np.take(values, index, axis=0) for name, values in rows.items()}

    def concat(self, parts: Sequence[ArrayRows]) -> ArrayRows:
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    def n_rows_of(self, rows: ArrayRows) -> int:
        return len(next(iter(rows.values()))) if rows else 0

    def to_batch(self, rows: ArrayRows) -> Any:
        return rows

    def as_arrays(self, rows: ArrayRows) -> ArrayRows | None:
        return rows

    def schema(self, rows: ArrayRows) -> dict[str, str]:
        return {name: f"{values.dtype}{list(values.shape[1:]) or ''}" for name, values in rows.items()}

    def nbytes(self, rows: ArrayRows) -> int:
        return sum(int(values.nbytes) for values in rows.values())


def run_rows(array: zarr.Array[Any], run_nbytes: int) -> int:
    """Rows in a run of whole chunks of about ``run_nbytes``."""
    row_nbytes = array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
    return block_rows(row_nbytes, run_nbytes, int(array.chunks[0]))


def read_in_runs(array: zarr.Array[Any], start: int, stop: int, run_nbytes: int) -> NDArray[Any]:
    """Rows ``start:stop`` of ``array``, read in runs of whole chunks of about ``run_nbytes``.

    While it reads, zarr holds the compressed and the decoded chunks of a
    selection besides the result: reading a pile at once takes about three
    times its size. Runs bound that to the result plus two runs.
    """
    chunk_rows = int(array.chunks[0])
    run = run_rows(array, run_nbytes)
    if stop - start <= run:
        return np.asarray(array[start:stop])
    out = np.empty((stop - start, *array.shape[1:]), dtype=array.dtype)
    first = start
    while first < stop:
        last = min((first // chunk_rows) * chunk_rows + run, stop)
        out[first - start : last - start] = array[first:last]
        first = last
    return out
