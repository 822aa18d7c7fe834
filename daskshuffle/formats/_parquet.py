"""Parquet datasets and dataframes: the source, Arrow IPC pieces and the Parquet pile store.

Rows are a ``pyarrow.Table``, so every Arrow type survives unchanged: integers,
floats, strings, binary, booleans, time-zone-aware timestamps, decimals,
dictionaries, lists, structs and nulls anywhere.

- Source: the files of one or more Parquet files, directories (hive partitions
  become columns), globs. A block is a run of consecutive row groups of one
  file, about ``block_nbytes`` of the selected columns; a row group is never
  split. Schemas are unified across files (Arrow's permissive promotion: a
  missing column is nulls, ``int32`` widens to ``int64``, ...); files whose
  schemas do not unify are named in the error, before anything is written.
- Pieces: one Arrow IPC file per block, one record batch per non-empty piece,
  uncompressed. The piece offsets sit in the file's schema metadata, so the
  merge reads exactly the batches of the piles it assembles (memory-mapped on
  a local disk) and no codec runs on data written once and read once.
- Destination: a Parquet dataset directory, one file ``part-<first row>.parquet``
  per merge group, whose row groups never straddle a pile (a pile is one row
  group), and the shuffle's metadata in ``_daskshuffle.json``, which Parquet
  readers skip. The sidecar says ``"complete": false`` until every file is
  written; a failed run removes the part files.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from numpy.typing import NDArray

from .._errors import DaskShuffleTypeError, DaskShuffleValueError, SourceNotFoundError
from .._options import PARQUET_COMPRESSIONS
from .._paths import filesystem, normalize
from ._base import Format

__all__ = [
    "METADATA_FILE",
    "ArrowFormat",
    "DataFrameFormat",
    "ParquetFormat",
    "open_parquet_sources",
    "unify_schemas",
]

#: The sidecar with the shuffle's metadata; Parquet readers skip names starting with "_".
METADATA_FILE = "_daskshuffle.json"
_PART = re.compile(r"part-(\d+)\.parquet")
_PIECE_OFFSETS = b"daskshuffle.piece_offsets"
_GLOB_CHARS = frozenset("*?[")
COMPRESSIONS = PARQUET_COMPRESSIONS


def arrow_filesystem(path: str, storage_options: dict[str, Any] | None) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem for ``path`` (native and memory-mapped on a local disk) and the path in it."""
    fs, inner = filesystem(path, storage_options)
    if isinstance(fs, LocalFileSystem):
        return pafs.LocalFileSystem(use_mmap=True), inner
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), inner


def _part_name(start: int) -> str:
    # Zero-padded so that every reader's lexicographic file order is row order.
    return f"part-{start:015d}.parquet"


# -- the source ---------------------------------------------------------------------
@dataclass(frozen=True)
class SourceFile:
    """One Parquet file of the source and what planning needs from its footer."""

    path: str
    partition: pads.Expression | None
    schema: pa.Schema
    row_group_rows: tuple[int, ...]
    row_group_nbytes: tuple[dict[str, int], ...]  # uncompressed bytes of each column


def _expand(item: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The Parquet files of one ``src`` item, each with its hive partition expression."""
    if not isinstance(item, str | os.PathLike):
        raise DaskShuffleTypeError(
            f"Expected src to be a path, URL or glob, or a list of them. Got {type(item).__name__} instead."
        )
    text = os.fspath(item)
    fs, inner = filesystem(text, storage_options)
    afs, _ = arrow_filesystem(text, storage_options)
    if _GLOB_CHARS & set(os.path.basename(text)):
        paths = sorted(path for path in fs.glob(inner) if fs.isfile(path))
        if not paths:
            raise SourceNotFoundError(
                f"Expected src to match Parquet files. Got {text!r}, which matches none, instead."
            )
        return [(path, None) for path in paths]
    if not fs.exists(inner):
        raise SourceNotFoundError(f"Expected src to be an existing Parquet file or directory. Got {text!r} instead.")
    if fs.isfile(inner):
        return [(inner, None)]
    dataset = pads.dataset(inner, filesystem=afs, format="parquet", partitioning="hive")
    files = [(fragment.path, fragment.partition_expression) for fragment in dataset.get_fragments()]
    if not files:
        raise DaskShuffleValueError(
            f"Expected src to contain Parquet files. Got {text!r}, a directory without any, instead."
        )
    partition_schema = dataset.partitioning.schema if dataset.partitioning is not None else pa.schema([])
    return [(path, (expression, partition_schema)) for path, expression in files]


def _inspect(path: str, partition: Any, afs: pafs.FileSystem) -> SourceFile:
    try:
        with afs.open_input_file(path) as file:
            metadata = pq.ParquetFile(file).metadata
        schema = metadata.schema.to_arrow_schema()
    except (pa.ArrowInvalid, OSError) as error:
        raise DaskShuffleValueError(
            f"Expected every source file to be Parquet. Got {path!r}, which pyarrow cannot read ({error}), instead."
        ) from error
    expression = None
    if partition is not None:
        expression, partition_schema = partition
        for field in partition_schema:
            if field.name not in schema.names:
                schema = schema.append(field)
    groups = [metadata.row_group(index) for index in range(metadata.num_row_groups)]
    return SourceFile(
        path=path,
        partition=expression,
        schema=schema,
        row_group_rows=tuple(group.num_rows for group in groups),
        row_group_nbytes=tuple(_column_nbytes(group) for group in groups),
    )


def _column_nbytes(group: Any) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for index in range(group.num_columns):
        column = group.column(index)
        name = column.path_in_schema.split(".")[0]
        sizes[name] = sizes.get(name, 0) + column.total_uncompressed_size
    return sizes


def unify_schemas(schemas: Sequence[pa.Schema], names: Sequence[str]) -> pa.Schema:
    """One schema for every file, with Arrow's permissive promotion, or an error naming files and columns."""
    try:
        unified = pa.unify_schemas(list(schemas), promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        unified = None
    if unified is not None:
        return unified.with_metadata(schemas[0].metadata)
    problems = []
    columns = dict.fromkeys(name for schema in schemas for name in schema.names)
    for column in columns:
        found = [
            (name, schema.field(column)) for name, schema in zip(names, schemas, strict=True) if column in schema.names
        ]
        try:
            pa.unify_schemas([pa.schema([field]) for _, field in found], promote_options="permissive")
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            by_type: dict[str, list[str]] = {}
            for name, field in found:
                by_type.setdefault(str(field.type), []).append(name)
            described = "; ".join(
                f"{kind} in {files[:3]}{' ...' if len(files) > 3 else ''}" for kind, files in by_type.items()
            )
            problems.append(f"column {column!r}: {described}")
    raise DaskShuffleValueError(
        "Expected the source files to have schemas Arrow can unify. Got "
        + ", ".join(problems)
        + " instead; cast the columns to one type, or pass columns=[...] to leave them out."
    )


def open_parquet_sources(
    src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    columns: Sequence[str] | None,
    block_nbytes: int,
    compression: str = "snappy",
    storage_options: dict[str, Any] | None = None,
) -> ParquetFormat:
    """Find and inspect every source file; raise before anything is written."""
    items: list[Any] = list(src) if isinstance(src, list | tuple) else [src]
    if not items:
        raise DaskShuffleValueError("Expected src to name at least one Parquet file. Got an empty list instead.")
    found = [(item, path, partition) for item in items for path, partition in _expand(item, storage_options)]
    protocols = {type(filesystem(os.fspath(item), storage_options)[0]).__name__ for item in items}
    if len(protocols) > 1:
        raise DaskShuffleValueError(
            f"Expected every source on one filesystem. Got {sorted(protocols)} instead; copy them to one place first."
        )
    afs, _ = arrow_filesystem(os.fspath(items[0]), storage_options)
    # Footers are small reads with a round trip each: read them side by side.
    with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
        files = list(pool.map(lambda entry: _inspect(entry[1], entry[2], afs), found))
    schemas = [file.schema for file in files]
    if columns is not None:
        available = list(dict.fromkeys(name for schema in schemas for name in schema.names))
        unknown = [name for name in columns if name not in available]
        if unknown:
            raise DaskShuffleValueError(
                f"Expected columns to name columns of the source. Got unknown {unknown} instead; it has {available}."
            )
        # Columns left out need not unify.
        schemas = [pa.schema([f for f in schema if f.name in columns], metadata=schema.metadata) for schema in schemas]
    schema = unify_schemas(schemas, [file.path for file in files])
    if columns is not None:
        schema = pa.schema([schema.field(name) for name in columns], metadata=schema.metadata)
    names = set(schema.names)
    blocks: list[tuple[int, tuple[int, ...]]] = []
    lengths: list[int] = []
    total_nbytes = 0
    for index, file in enumerate(files):
        run: list[int] = []
        run_rows = run_nbytes = 0
        for group, (rows, sizes) in enumerate(zip(file.row_group_rows, file.row_group_nbytes, strict=True)):
            nbytes = sum(size for name, size in sizes.items() if name in names)
            total_nbytes += nbytes
            if run and run_nbytes + nbytes > block_nbytes:
                blocks.append((index, tuple(run)))
                lengths.append(run_rows)
                run, run_rows, run_nbytes = [], 0, 0
            run.append(group)
            run_rows += rows
            run_nbytes += nbytes
        if run:
            blocks.append((index, tuple(run)))
            lengths.append(run_rows)
    n_rows = sum(lengths)
    return ParquetFormat(
        filesystem=afs,
        files=[(file.path, file.partition) for file in files],
        sources=[normalize(item) if isinstance(item, str | os.PathLike) else str(item) for item in items],
        blocks=blocks,
        lengths=lengths,
        schema=schema,
        row_nbytes=max(1, -(-total_nbytes // max(n_rows, 1))),
        compression=compression,
        storage_options=storage_options,
    )


# -- rows in memory -------------------------------------------------------------------
def _take(rows: pa.Table, index: NDArray[np.intp]) -> pa.Table:
    return rows.take(pa.array(np.asarray(index, dtype=np.int64)))


def _concat(parts: Sequence[pa.Table]) -> pa.Table:
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


class ArrowFormat(Format[pa.Table]):
    """Rows as ``pyarrow.Table``: Arrow IPC pieces and a Parquet pile store.

    Subclasses say where the rows come from (Parquet files, a dataframe).
    """

    kind = "parquet"

    def __init__(
        self,
        *,
        schema: pa.Schema,
        lengths: Sequence[int],
        row_nbytes: int,
        compression: str,
        storage_options: dict[str, Any] | None,
    ) -> None:
        self.schema = schema
        self.lengths = tuple(int(length) for length in lengths)
        self._row_nbytes = int(row_nbytes)
        self.compression = None if compression == "none" else compression
        self.storage_options = storage_options

    @property
    def block_lengths(self) -> tuple[int, ...]:
        return self.lengths

    @property
    def row_nbytes(self) -> int:
        return self._row_nbytes

    @property
    def variables(self) -> list[str]:
        return list(self.schema.names)

    def take(self, rows: pa.Table, index: NDArray[np.intp]) -> pa.Table:
        return _take(rows, index)

    def concat(self, parts: Sequence[pa.Table]) -> pa.Table:
        return _concat(parts)

    def slice(self, rows: pa.Table, start: int, stop: int) -> pa.Table:
        return rows.slice(start, stop - start)

    # -- pieces --------------------------------------------------------------
    def _piece_path(self, tmp: str, block: int) -> tuple[pafs.FileSystem, str]:
        afs, root = arrow_filesystem(tmp, self.storage_options)
        return afs, f"{root}/{block}.arrow"

    def prepare_pieces(self, tmp: str) -> None:
        afs, root = arrow_filesystem(tmp, self.storage_options)
        afs.create_dir(root, recursive=True)

    def write_pieces(self, tmp: str, block: int, rows: pa.Table, piece_offsets: NDArray[np.int64]) -> None:
        # The IPC file format holds one dictionary per column: give every batch the same one.
        rows = rows.unify_dictionaries().combine_chunks()
        schema = rows.schema.with_metadata({_PIECE_OFFSETS: json.dumps(piece_offsets.tolist()).encode()})
        afs, path = self._piece_path(tmp, block)
        with afs.open_output_stream(path) as sink, pa.ipc.new_file(sink, schema) as writer:
            for start, stop in zip(piece_offsets[:-1].tolist(), piece_offsets[1:].tolist(), strict=True):
                if stop > start:
                    for batch in rows.slice(start, stop - start).to_batches():
                        writer.write_batch(batch)

    def read_pieces(self, tmp: str, block: int, start: int, stop: int) -> pa.Table:
        if stop <= start:
            return self.schema.empty_table()
        afs, path = self._piece_path(tmp, block)
        reader = pa.ipc.open_file(afs.open_input_file(path))
        offsets = np.asarray(json.loads(reader.schema.metadata[_PIECE_OFFSETS]), dtype=np.int64)
        starts = np.unique(offsets[:-1][np.diff(offsets) > 0])  # where each written batch starts
        first = int(np.searchsorted(starts, start, side="right")) - 1
        last = int(np.searchsorted(starts, stop, side="left"))
        batches = [reader.get_batch(index) for index in range(first, last)]
        table = pa.Table.from_batches(batches, schema=reader.schema).replace_schema_metadata(self.schema.metadata)
        return table.slice(start - int(starts[first]), stop - start)

    # -- the destination -----------------------------------------------------
    def write_alignment(self) -> int:
        return 1  # one file per merge group: no two tasks ever share a file

    def _write_sidecar(self, dst: str, metadata: Mapping[str, Any]) -> None:
        fs, root = filesystem(dst, self.storage_options)
        staged = f"{root}/{METADATA_FILE}.partial"
        with fs.open(staged, "w") as file:
            json.dump(dict(metadata), file)
        fs.mv(staged, f"{root}/{METADATA_FILE}")  # a reader sees the old sidecar or the new one, never half

    def create_destination(self, dst: str, n_rows: int, metadata: Mapping[str, Any]) -> None:
        fs, root = filesystem(dst, self.storage_options)
        fs.makedirs(root, exist_ok=True)
        self._write_sidecar(dst, metadata)
        if n_rows == 0:  # readers need at least one file to know the schema
            self.write_rows(dst, 0, self.schema.empty_table(), None)

    def write_rows(self, dst: str, start: int, rows: pa.Table, piece_info: Any) -> None:
        fs, root = filesystem(dst, self.storage_options)
        with fs.open(f"{root}/{METADATA_FILE}", "r") as file:
            pile_offsets = np.asarray(json.load(file)["pile_offsets"], dtype=np.int64)
        stop = start + rows.num_rows
        # A row group per pile: the loader reads a pile as whole row groups and nothing more.
        cuts = pile_offsets[(pile_offsets > start) & (pile_offsets < stop)] - start
        bounds = [0, *cuts.tolist(), rows.num_rows]
        afs, _ = arrow_filesystem(dst, self.storage_options)
        rows = rows.replace_schema_metadata(self.schema.metadata)
        with pq.ParquetWriter(
            afs.open_output_stream(f"{root}/{_part_name(start)}"),
            self.schema,
            compression=self.compression,
            write_page_checksum=True,
        ) as writer:
            for a, b in itertools.pairwise(bounds):
                if b > a or rows.num_rows == 0:
                    writer.write_table(rows.slice(a, b - a), row_group_size=max(b - a, 1))

    def finalize_destination(self, dst: str, metadata: Mapping[str, Any]) -> None:
        self._write_sidecar(dst, metadata)

    def discard_destination(self, dst: str) -> None:
        # Part files are a valid Parquet dataset to other readers: leave none of them.
        fs, root = filesystem(dst, self.storage_options)
        for path in fs.ls(root, detail=False) if fs.exists(root) else []:
            if _PART.fullmatch(path.rsplit("/", 1)[-1]):
                fs.rm(path)


class ParquetFormat(ArrowFormat):
    """Parquet files, read a run of row groups at a time."""

    def __init__(
        self,
        *,
        filesystem: pafs.FileSystem,
        files: list[tuple[str, Any]],
        sources: list[str],
        blocks: list[tuple[int, tuple[int, ...]]],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.filesystem = filesystem
        self.files = files
        self.sources = sources
        self.blocks = blocks

    def read_block(self, block: int) -> pa.Table:
        index, row_groups = self.blocks[block]
        path, partition = self.files[index]
        fragment = pads.ParquetFileFormat().make_fragment(
            path, filesystem=self.filesystem, partition_expression=partition, row_groups=list(row_groups)
        )
        # The scanner fills missing columns with nulls, adds partition columns and casts to the unified schema.
        table = fragment.to_table(schema=self.schema, columns=self.schema.names)
        return table.replace_schema_metadata(self.schema.metadata)

    def describe_source(self) -> list[Any]:
        return list(self.sources)


class DataFrameFormat(ArrowFormat):
    """A pandas or dask DataFrame: each partition is a block, computed by its own task.

    ``inputs`` (the graph and one key per block, see :meth:`Format.block_inputs`)
    stays with the caller: it is not pickled into the tasks.
    """

    def __init__(self, *, inputs: tuple[dict[Any, Any], list[Any]], preserve_index: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._inputs: tuple[dict[Any, Any], list[Any]] | None = inputs
        self.preserve_index = preserve_index

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_inputs": None}

    def block_inputs(self) -> tuple[dict[Any, Any], list[Any]] | None:
        return self._inputs

    def read_block(self, block: int) -> pa.Table:
        raise NotImplementedError("the blocks of a DataFrame reach read_block_from through block_inputs")

    def read_block_from(self, block: int, data: Any) -> pa.Table:
        table = pa.Table.from_pandas(data, schema=self.schema, preserve_index=self.preserve_index, safe=True)
        return table.replace_schema_metadata(self.schema.metadata)

    def describe_source(self) -> list[Any]:
        return []  # data in memory or computed by dask: no path to record or to protect
