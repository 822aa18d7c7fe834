"""How a Parquet pile store's columns are encoded: dictionary and codec chosen from the data, column by column.

pyarrow dictionary-encodes every column by default, which suits neither
columns of mostly distinct numbers nor reading them fast: each column gets a
dictionary only for few distinct values (:data:`DICTIONARY_FRACTION`), and with
``compression="auto"`` snappy only where a sample compresses.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from ._layout import COMPRESSIBLE_RATIO

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["AUTO", "column_options"]

#: The codec that chooses per column.
AUTO = "auto"
#: What ``"auto"`` gives a column that compresses.
AUTO_CODEC = "snappy"
#: A column is dictionary-encoded if its sample has at most this fraction of distinct values.
DICTIONARY_FRACTION = 0.5
#: Rows of a part file sampled to choose its columns' encodings.
SAMPLE_ROWS = 65_536
#: Bytes of a column sampled to see whether it compresses.
SAMPLE_NBYTES = 2**20


@lru_cache(maxsize=16)
def leaf_paths(schema: pa.Schema) -> dict[str, list[str]]:
    """Each top-level column's leaf column paths in the Parquet file pyarrow writes for ``schema``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> leaf_paths(pa.schema({"id": pa.int64(), "tags": pa.list_(pa.string())}))
    {'id': ['id'], 'tags': ['tags.list.element']}
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    empty = schema.empty_table()
    sink = pa.BufferOutputStream()
    pq.write_table(empty, sink)
    parquet_schema = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    paths: dict[str, list[str]] = {}
    leaf = 0
    for field in schema:
        count = len(_leaves(empty.column(field.name).combine_chunks()))  # the leaves of no rows
        paths[field.name] = [parquet_schema.column(leaf + offset).path for offset in range(count)]
        leaf += count
    return paths


def _leaves(array: pa.Array) -> list[pa.Array]:
    """The values of each Parquet leaf column of ``array``, in the order of :func:`leaf_paths`."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_struct(kind):
        return [leaf for field in array.flatten() for leaf in _leaves(field)]
    if pa.types.is_map(kind):
        return _leaves(array.keys) + _leaves(array.items)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaves(array.flatten())
    return [array]


def _few_distinct(leaf: pa.Array) -> bool:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        distinct = int(pc.count_distinct(leaf).as_py())
    except pa.ArrowNotImplementedError:  # a type Arrow cannot count (all nulls, an extension type): plain
        return False
    return distinct <= DICTIONARY_FRACTION * max(len(leaf), 1)


def _compresses(leaf: pa.Array) -> bool:
    """Whether snappy shrinks the leaf's values (its buffers but the validity bitmap) enough to be worth it."""
    import pyarrow as pa

    parts, size = [], 0
    for buffer in leaf.buffers()[1:]:
        if buffer is not None and size < SAMPLE_NBYTES:
            parts.append(buffer.slice(0, min(buffer.size, SAMPLE_NBYTES - size)).to_pybytes())
            size += len(parts[-1])
    raw = b"".join(parts)
    if not raw:
        return False
    return len(raw) >= COMPRESSIBLE_RATIO * len(pa.compress(raw, codec=AUTO_CODEC, asbytes=True))


def column_options(table: pa.Table, compression: str) -> tuple[list[str], str | dict[str, str]]:
    """The columns to dictionary-encode, and the codec (or a codec per column), for writing ``table``.

    ``compression`` is ``"auto"``, ``"none"`` or a Parquet codec; the result
    goes to ``pyarrow.parquet.ParquetWriter(use_dictionary=..., compression=...)``.

    Examples
    --------
    >>> import numpy as np, pyarrow as pa
    >>> table = pa.table({"label": np.arange(1000) % 3, "x": np.random.default_rng(0).random(1000)})
    >>> column_options(table, "auto")
    (['label'], {'label': 'snappy', 'x': 'none'})
    >>> column_options(table, "zstd")
    (['label'], 'zstd')
    """
    import pyarrow as pa

    sample = table.slice(0, SAMPLE_ROWS)
    dictionary: list[str] = []
    codecs: dict[str, str] = {}
    for name, paths in leaf_paths(table.schema).items():
        column = sample.column(name).combine_chunks()
        for path, leaf in zip(paths, _leaves(column), strict=True):
            leaf = leaf.slice(0, SAMPLE_ROWS)  # a list column has many values a row
            if pa.types.is_dictionary(leaf.type) or _few_distinct(leaf):
                dictionary.append(path)
            if compression == AUTO:
                codecs[path] = AUTO_CODEC if _compresses(leaf) else "none"
    return dictionary, codecs if compression == AUTO else compression
