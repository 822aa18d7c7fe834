"""pandas and dask DataFrames: each partition a block, computed by its own task, into a Parquet pile store.

Rows, pieces and the destination are the Parquet format's
(:mod:`._parquet_store`). A dask DataFrame's partitions are computed by its own
tasks (a :class:`._base.CollectionSource`); a pandas DataFrame is cut into
blocks of about ``block_nbytes``, each a plain value in the graph. The plan
needs every partition's length before any row moves, so a dask DataFrame's
partitions are described (counted, sized, their Arrow schema learnt) first.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from ._base import CollectionSource
from ._parquet import unify_schemas
from ._parquet_store import ArrowTables

__all__ = ["DataFrameFormat", "open_dataframe_source"]

#: The graph layer's ``dataframe_inputs``: ``describe`` of every partition of a dask
#: DataFrame, computed, with the graph and keys of its partitions.
DataFrameInputs = Callable[[Any, Callable[[Any], Any]], tuple[list[Any], dict[Any, Any], list[Any]]]


def _keeps_index(index: pd.Index, choice: bool | None) -> bool:
    if choice is not None:
        return choice
    # A default RangeIndex is only row positions (per partition, for most dask DataFrames): drop it.
    return not (isinstance(index, pd.RangeIndex) and index.name is None)


def _check_names(frame: pd.DataFrame) -> None:
    names = list(frame.columns)
    bad = [name for name in names if not isinstance(name, str)]
    if bad:
        raise DaskShuffleTypeError(
            f"Expected string column names (Parquet needs them). Got {bad} instead; rename the columns, "
            "for example df.columns = df.columns.map(str)."
        )
    if len(set(names)) != len(names):
        raise DaskShuffleValueError(f"Expected each column name once. Got {names} instead; rename the duplicates.")


def _arrow_schema(frame: pd.DataFrame, preserve_index: bool) -> pa.Schema:
    try:
        return pa.Schema.from_pandas(frame, preserve_index=preserve_index)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise DaskShuffleTypeError(
            f"Expected columns Arrow can hold. Got a DataFrame Arrow cannot convert ({error}) instead; "
            "cast the offending column to a supported type."
        ) from error


def describe_partition(partition: pd.DataFrame, preserve_index: bool) -> tuple[int, int, pa.Schema]:
    """Rows, bytes in memory and Arrow schema of one partition (runs in a task)."""
    nbytes = int(partition.memory_usage(deep=True, index=True).sum())
    return len(partition), nbytes, _arrow_schema(partition, preserve_index)


def _schema_of(meta: pd.DataFrame, described: list[tuple[int, int, pa.Schema]], preserve_index: bool) -> pa.Schema:
    """The meta's schema, with the types of object columns learnt from the partitions."""
    schemas = [_arrow_schema(meta, preserve_index)] + [schema for _, _, schema in described]
    unified = unify_schemas(schemas, ["meta"] + [f"partition {index}" for index in range(len(described))])
    fields = []
    for field in unified:
        if pa.types.is_dictionary(field.type):
            # Partitions may hold more categories than others: leave the codes room to grow.
            field = field.with_type(pa.dictionary(pa.int32(), field.type.value_type, field.type.ordered))
        fields.append(field)
    return pa.schema(fields, metadata=schemas[0].metadata)


def _pandas_inputs(frame: pd.DataFrame, block_nbytes: int) -> tuple[list[int], dict[Any, Any], list[Any]]:
    """Cut an in-memory DataFrame into blocks of about ``block_nbytes``: a graph of plain values."""
    n_rows = len(frame)
    nbytes = int(frame.memory_usage(deep=True, index=True).sum())
    step = max(1, block_nbytes // max(1, -(-nbytes // max(n_rows, 1))))
    name = f"daskshuffle-dataframe-{uuid.uuid4().hex}"
    bounds = [(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]
    graph: dict[Any, Any] = {(name, i): frame.iloc[a:b] for i, (a, b) in enumerate(bounds)}
    return [b - a for a, b in bounds], graph, list(graph)


class DataFrameFormat(ArrowTables, CollectionSource[pa.Table]):
    """A pandas or dask DataFrame: each partition is a block, computed by its own task.

    ``inputs`` (the graph and one key per block) stays with the caller: it is
    not pickled into the tasks.
    """

    kind = "parquet"

    def __init__(
        self,
        *,
        inputs: tuple[dict[Any, Any], list[Any]],
        preserve_index: bool,
        **table: Any,
    ) -> None:
        super().__init__(**table)
        self._inputs: tuple[dict[Any, Any], list[Any]] | None = inputs
        self.preserve_index = preserve_index

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_inputs": None}

    def describe_source(self) -> list[Any]:
        return []  # data in memory or computed by dask: no path to record or to protect

    def block_inputs(self) -> tuple[dict[Any, Any], list[Any]]:
        if self._inputs is None:
            raise RuntimeError("block_inputs runs where the shuffle was planned, with the DataFrame's graph")
        return self._inputs

    def rows_of_block(self, block: int, value: Any) -> pa.Table:
        table = pa.Table.from_pandas(value, schema=self.schema, preserve_index=self.preserve_index, safe=True)
        return table.replace_schema_metadata(self.schema.metadata)


def open_dataframe_source(
    df: Any,
    *,
    index: bool | None,
    block_nbytes: int,
    compression: str,
    storage_options: dict[str, Any] | None,
    dask_inputs: DataFrameInputs | None,
) -> DataFrameFormat:
    """The format of a dask DataFrame (``dask_inputs`` given) or a pandas one: partitions described first."""
    meta = df._meta if dask_inputs is not None else df
    _check_names(meta)
    preserve_index = _keeps_index(meta.index, index)
    if dask_inputs is not None:
        describe = functools.partial(describe_partition, preserve_index=preserve_index)
        described, graph, keys = dask_inputs(df, describe)
        lengths = [rows for rows, _, _ in described]
    else:
        described = [describe_partition(df, preserve_index)]
        lengths, graph, keys = _pandas_inputs(df, block_nbytes)
    return DataFrameFormat(
        inputs=(graph, keys),
        preserve_index=preserve_index,
        schema=_schema_of(meta, described, preserve_index),
        lengths=lengths,
        row_nbytes=max(1, -(-sum(nbytes for _, nbytes, _ in described) // max(sum(lengths), 1))),
        compression=compression,
        storage_options=storage_options,
    )
