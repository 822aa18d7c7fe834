"""pandas and dask DataFrames, into a Parquet pile store.

The plan needs every block's length before any row moves, and computing a dask DataFrame twice would repeat
whatever made it. So its partitions are computed once, each described and spooled to scratch storage as an Arrow
IPC file that pass 1 reads (:class:`SpooledFrameFormat`). A pandas DataFrame is cut into blocks of about
``block_nbytes``, each a plain value in the graph (:class:`DataFrameFormat`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from ..formats import CollectionSource, FileSource
from ..pilestore import ParquetWriting, arrow_sink
from ..plan import block_rows
from ..storage import Location, identify_token
from ._arrow_pieces import ArrowTables, arrow_source
from ._parquet import unify_schemas

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["open_dataframe_source"]

#: The graph layer's ``describe_partitions``: ``describe(index, partition)`` of every
#: partition of a dask DataFrame, computed once.
DescribePartitions = Callable[[Any, Callable[[int, Any], Any]], list[Any]]


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
    import pyarrow as pa

    try:
        return pa.Schema.from_pandas(frame, preserve_index=preserve_index)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise DaskShuffleTypeError(
            f"Expected columns Arrow can hold. Got a DataFrame Arrow cannot convert ({error}) instead; "
            "cast the offending column to a supported type."
        ) from error


def describe_partition(partition: pd.DataFrame, preserve_index: bool) -> tuple[int, int, pa.Schema]:
    """Rows, bytes in memory and Arrow schema of one partition."""
    nbytes = int(partition.memory_usage(deep=True, index=True).sum())
    return len(partition), nbytes, _arrow_schema(partition, preserve_index)


def _spool_file(spool: Location, block: int) -> Location:
    return spool.join(f"{block}.arrow")


def spool_partition(
    block: int, partition: pd.DataFrame, *, spool: Location, preserve_index: bool
) -> tuple[int, int, pa.Schema]:
    """Describe partition ``block`` and write it to ``spool`` (runs in the partition's task)."""
    import pyarrow as pa

    described = describe_partition(partition, preserve_index)
    table = pa.Table.from_pandas(partition, schema=described[2], preserve_index=preserve_index)
    with arrow_sink(_spool_file(spool, block)) as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return described


def _schema_of(meta: pd.DataFrame, described: list[tuple[int, int, pa.Schema]], preserve_index: bool) -> pa.Schema:
    """The meta's schema, with the types of object columns learnt from the partitions."""
    import pyarrow as pa

    schemas = [_arrow_schema(meta, preserve_index)] + [schema for _, _, schema in described]
    unified = unify_schemas(schemas, ["meta"] + [f"partition {index}" for index in range(len(described))])
    fields = []
    for field in unified:
        if pa.types.is_dictionary(field.type):
            # Partitions may hold more categories than others: leave the codes room to grow.
            field = field.with_type(pa.dictionary(pa.int32(), field.type.value_type, field.type.ordered))
        fields.append(field)
    return pa.schema(fields, metadata=schemas[0].metadata)


class DataFrameFormat(ArrowTables, CollectionSource["pa.Table"]):
    """A pandas DataFrame in blocks: each is a value of ``inputs`` (the graph and one key per block)."""

    def __init__(self, *, inputs: tuple[dict[Any, Any], list[Any]], preserve_index: bool, **table: Any) -> None:
        super().__init__(**table)
        self._inputs = inputs
        self.preserve_index = preserve_index

    def rows_of_block(self, block: int, value: Any) -> pa.Table:
        import pyarrow as pa

        table = pa.Table.from_pandas(value, schema=self.schema, preserve_index=self.preserve_index, safe=True)
        return table.replace_schema_metadata(self.schema.metadata)


class SpooledFrameFormat(ArrowTables, FileSource["pa.Table"]):
    """A dask DataFrame, computed once into a spool of Arrow IPC files (one per partition) that pass 1 reads."""

    def __init__(self, *, spool: Location, **table: Any) -> None:
        super().__init__(**table)
        self.spool = spool

    def read_block(self, block: int) -> pa.Table:
        import pyarrow as pa

        with arrow_source(_spool_file(self.spool, block)) as source:
            table = pa.ipc.open_file(source).read_all()
        # Each partition was written with its own types (categories, all-null columns): cast to the unified schema.
        return table.cast(self.schema.remove_metadata()).replace_schema_metadata(self.schema.metadata)


def open_dataframe_source(
    df: Any,
    *,
    index: bool | None,
    block_nbytes: int,
    writing: ParquetWriting,
    spool: Location | None = None,
    describe_partitions: DescribePartitions | None = None,
    meta: pd.DataFrame | None = None,
    token: str | None = None,
) -> DataFrameFormat | SpooledFrameFormat:
    """The format of a pandas DataFrame, or of a dask one (``describe_partitions``, ``spool`` and ``meta`` given).

    A dask DataFrame is computed here, once, into ``spool``, which the caller
    creates beforehand and removes after the shuffle; ``meta`` is the empty
    pandas DataFrame its partitions are like (``dask.dataframe.utils.make_meta``),
    so that sources never import dask. ``token`` is the DataFrame's dask token
    (its identity), taken by the caller before.
    """
    import pandas as pd

    identity = [identify_token("DataFrame", token)] if token is not None else []
    frame: pd.DataFrame = df if meta is None else meta
    _check_names(frame)
    # A default RangeIndex is only row positions (per partition, for most dask DataFrames): drop it.
    preserve_index = (
        not (isinstance(frame.index, pd.RangeIndex) and frame.index.name is None) if index is None else index
    )
    if describe_partitions is None or spool is None:
        described = [describe_partition(df, preserve_index)]
    else:
        described = describe_partitions(
            df, functools.partial(spool_partition, spool=spool, preserve_index=preserve_index)
        )
    n_rows = sum(rows for rows, _, _ in described)
    table = {
        "schema": _schema_of(frame, described, preserve_index),
        "row_nbytes": max(1, -(-sum(nbytes for _, nbytes, _ in described) // max(n_rows, 1))),
        "writing": writing,
        "identity": identity,
    }
    if spool is not None:
        return SpooledFrameFormat(spool=spool, lengths=[rows for rows, _, _ in described], **table)
    # A pandas DataFrame: blocks of about block_nbytes, each a plain value in the graph.
    step = block_rows(table["row_nbytes"], block_nbytes)
    name = f"daskshuffle-dataframe-{uuid.uuid4().hex}"
    bounds = [(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]
    graph: dict[Any, Any] = {(name, i): df.iloc[a:b] for i, (a, b) in enumerate(bounds)}
    lengths = [b - a for a, b in bounds]
    return DataFrameFormat(inputs=(graph, list(graph)), preserve_index=preserve_index, lengths=lengths, **table)
