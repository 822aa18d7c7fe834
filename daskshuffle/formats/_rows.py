"""Rows as numpy arrays: a ``dict`` of arrays keyed by variable name, all of the same length.

Every variable is shuffled with one permutation, so the rows of ``x``, ``y`` and
``id`` stay aligned. Shared by the sources that hold arrays, the Zarr pile store's
writer and its readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["ArrayRows", "ArrayRowsMethods", "Variable", "concat_rows"]

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


def concat_rows(parts: Sequence[ArrayRows]) -> ArrayRows:
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


class ArrayRowsMethods:
    """``take``, ``concat`` and ``n_rows_of`` of rows that are a dict of numpy arrays (pieces, pile readers)."""

    def take(self, rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
        return {name: np.take(values, index, axis=0) for name, values in rows.items()}

    def concat(self, parts: Sequence[ArrayRows]) -> ArrayRows:
        return concat_rows(parts)

    def n_rows_of(self, rows: ArrayRows) -> int:
        return len(next(iter(rows.values()))) if rows else 0
