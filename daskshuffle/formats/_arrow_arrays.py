"""Arrow columns as numpy arrays: what a Parquet pile reader hands out as a batch of numpy arrays.

Numbers without nulls keep their dtype, numbers with nulls become floats with
NaN, fixed-size lists of numbers without nulls (embeddings) become arrays of
one more dimension, and strings and other nested values become object arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["concat", "dense_values", "is_nested", "take", "to_numpy"]


def is_nested(kind: pa.DataType) -> bool:
    """Whether values of ``kind`` are nested (lists, structs, maps), dictionary-encoded or not."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return is_nested(kind.value_type)
    return bool(pa.types.is_nested(kind))


def dense_values(column: pa.ChunkedArray) -> tuple[pa.ChunkedArray, tuple[int, ...]] | None:
    """``column``'s numbers (fixed-size lists flattened) and the shape of a row: ``()`` for numbers, ``(n, ...)`` for
    fixed-size lists.

    ``None`` for anything else, and for fixed-size lists with a null at any level.
    """
    import pyarrow as pa

    kind, shape = column.type, []
    while pa.types.is_fixed_size_list(kind):
        if column.null_count:
            return None
        shape.append(kind.list_size)
        column = pa.chunked_array([chunk.flatten() for chunk in column.chunks], type=kind.value_type)
        kind = kind.value_type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        return None
    return (column, tuple(shape)) if not shape or not column.null_count else None


def to_numpy(column: pa.ChunkedArray, writeable: bool = True) -> NDArray[Any]:
    """``column`` as one numpy array, writeable unless ``writeable`` is false (then a view where Arrow allows)."""
    import pyarrow as pa

    kind = column.type
    if pa.types.is_fixed_size_list(kind) and (dense := dense_values(column)) is not None:
        # An embedding: one array of one more dimension, rather than an object array of arrays.
        return to_numpy(dense[0], writeable).reshape(len(column), *dense[1])
    if pa.types.is_dictionary(kind):
        column = column.cast(kind.value_type)
    values: NDArray[Any] = column.to_numpy(zero_copy_only=False)
    # Arrow hands out read-only views; a batch is the user's to modify (torch.from_numpy needs that).
    return values.copy() if writeable and not values.flags.writeable else values


def take(rows: pa.Table, index: NDArray[np.intp]) -> pa.Table:
    import pyarrow as pa

    return rows.take(pa.array(np.asarray(index, dtype=np.int64)))


def concat(parts: Sequence[pa.Table]) -> pa.Table:
    import pyarrow as pa

    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
