"""Parquet datasets as a source: files, directories (hive partitions become columns) or globs, read a block (a run
of whole row groups of one file, about ``block_nbytes``) at a time. Schemas unify with Arrow's permissive promotion;
files that do not unify are named in the error, before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .._config import int_setting
from .._errors import Argument, DaskShuffleValueError
from ..formats import (
    FetchedFile,
    FileSource,
    NotFetchedError,
    coalesce,
    column_chunk_bytes,
    fetch_spans,
    footer_tail,
    read_footer,
    with_footer_tails,
)
from ..pilestore import ParquetWriting, arrow_filesystem
from ..plan import MIN_READ_NBYTES
from ..storage import Location, bounded, identify_files, normalize, raise_storage_failure
from ._arrow_pieces import ArrowTables
from ._found import found, parse_sources
from ._undecodable import undecodable, undecodable_parquet

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs

__all__ = ["COMPRESSIONS", "list_parquet_sources", "open_parquet_sources", "unify_schemas", "whole_runs"]

COMPRESSIONS = ("auto", "snappy", "zstd", "lz4", "gzip", "brotli", "none")


@dataclass(frozen=True)
class SourceFile:
    """One Parquet file of the source and what planning needs from its footer."""

    path: str
    partition: pads.Expression | None
    schema: pa.Schema
    row_group_rows: tuple[int, ...]
    row_group_nbytes: tuple[dict[str, int], ...]  # uncompressed bytes of each column
    # On object storage only: where each row group's column chunks lie, as (column, first byte, end), and the
    # bytes pyarrow reads for the footer. A read fetches them all at once.
    row_group_bytes: tuple[tuple[tuple[str, int, int], ...], ...] = ()
    footer_bytes: tuple[int, int] = (0, 0)


def _expand(text: str, storage_options: dict[str, Any] | None) -> list[tuple[str, Any, int]]:
    """The Parquet files of one ``src`` item, each with its hive partition expression and its size, from the
    storage's listing. Names starting with ``.`` or ``_`` are left out, as every Parquet reader does."""
    where = Location.of(text, storage_options)
    fs, inner = where.fs, where.path
    matched, info = found(where, text, "existing Parquet files or directories")
    if matched is not None:
        return [(path, None, int(info["size"])) for path, info in matched.items()]
    if info is not None and info["type"] == "file":
        return [(inner, None, int(info["size"]))]
    root = inner.rstrip("/")
    with where.reaching():
        listed = bounded(fs, "find", root, detail=True, what=f"the listing of {text}")
    below = {path[len(root) + 1 :]: info for path, info in listed.items() if path != root}
    if {relative.split("/", 1)[0] for relative in below} & {"zarr.json", ".zgroup", ".zarray"}:
        raise DaskShuffleValueError(
            f"Expected src to be Parquet files. Got {text!r}, which is a Zarr store, instead; shuffle it with "
            "shuffle_zarr (daskshuffle zarr), or shuffle_xarray for an xarray dataset."
        )
    files = sorted(
        (f"{root}/{relative}", int(info["size"]))
        for relative, info in below.items()
        if info["type"] == "file" and not any(part.startswith((".", "_")) for part in relative.split("/"))
    )
    if not files:
        raise DaskShuffleValueError(
            f"Expected src to contain Parquet files. Got {text!r}, a directory without any, instead."
        )
    return [(path, partition, size) for (path, size), partition in zip(files, _hive(where, root, files), strict=True)]


def _hive(where: Location, root: str, files: list[tuple[str, int]]) -> list[tuple[pads.Expression, pa.Schema]]:
    """Each file's hive partition expression (``year=2024/``) and the partitions' schema, from the paths alone
    (pyarrow's discovery, asked to inspect no file)."""
    import pyarrow.dataset as pads

    afs, _ = arrow_filesystem(where)
    options = pads.FileSystemFactoryOptions(partition_base_dir=root)
    options.partitioning_factory = pads.HivePartitioning.discover()
    factory = pads.FileSystemDatasetFactory(afs, [path for path, _ in files], pads.ParquetFileFormat(), options)
    schema = factory.inspect(fragments=0)
    dataset = factory.finish(schema=schema)
    return [(fragment.partition_expression, schema) for fragment in dataset.get_fragments()]


def _inspect_all(found: list[tuple[str, Any, int]], where: Location) -> list[SourceFile]:
    """Every file's footer, and what planning needs from it, by a few threads (on object storage, from the last
    bytes of ``shuffle.parquet-footers-at-once`` files requested at once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    remote = not where.is_local

    def inspect(index: int, tail: tuple[int, bytes] | None) -> SourceFile:
        path, partition, size = found[index]
        try:
            metadata = read_footer(where.fs, path, size, tail) if remote else pq.read_metadata(path)
            schema = metadata.schema.to_arrow_schema()
        except (pa.ArrowInvalid, OSError) as error:
            raise DaskShuffleValueError(
                f"Expected every source file to be Parquet. Got {path!r}, which pyarrow cannot read as Parquet "
                f"({error}), instead; name the Parquet files (a glob such as 'dir/*.parquet') or remove the others."
            ) from error
        expression = None
        if partition is not None:
            expression, partition_schema = partition
            for field in partition_schema:
                if field.name not in schema.names:
                    schema = schema.append(field)
        groups = [metadata.row_group(group) for group in range(metadata.num_row_groups)]
        chunks = [_column_chunks(group) for group in groups]
        return SourceFile(
            path=path,
            partition=expression,
            schema=schema,
            row_group_rows=tuple(group.num_rows for group in groups),
            row_group_nbytes=tuple(nbytes for nbytes, _ in chunks),
            row_group_bytes=tuple(located for _, located in chunks) if remote else (),
            footer_bytes=footer_tail(size, metadata) if remote else (0, 0),
        )

    files = [(path, size) for path, _, size in found]
    at_once = int_setting("shuffle.parquet-footers-at-once")
    return with_footer_tails(where.fs if remote else None, files, inspect, at_once, 16)


def _column_chunks(group: Any) -> tuple[dict[str, int], tuple[tuple[str, int, int], ...]]:
    """Each column's uncompressed bytes in the row group ``group``, and where its column chunks lie: (column, first
    byte, end)."""
    nbytes: dict[str, int] = {}
    bytes_at = []
    for index in range(group.num_columns):
        column = group.column(index)
        name = column.path_in_schema.split(".")[0]
        nbytes[name] = nbytes.get(name, 0) + column.total_uncompressed_size
        bytes_at.append((name, *column_chunk_bytes(column)))
    return nbytes, tuple(bytes_at)


def whole_runs(nbytes: Sequence[int], block_nbytes: int) -> list[list[int]]:
    """Units of ``nbytes`` each (row groups, chunks) in runs of consecutive units of about ``block_nbytes``: a unit
    is never split, and one larger than ``block_nbytes`` is a run alone."""
    runs: list[list[int]] = []
    filled = 0
    for unit, size in enumerate(nbytes):
        if not runs or filled + size > block_nbytes:
            runs.append([])
            filled = 0
        runs[-1].append(unit)
        filled += size
    return runs


def _block_spans(file: SourceFile, row_groups: Sequence[int], names: set[str]) -> tuple[tuple[int, int], ...]:
    """The byte ranges a read of ``row_groups`` of a remote ``file`` fetches: its columns of ``names``, the footer."""
    if not file.row_group_bytes:
        return ()
    chunks = [(first, end) for group in row_groups for name, first, end in file.row_group_bytes[group] if name in names]
    return coalesce([*chunks, file.footer_bytes], MIN_READ_NBYTES["object"])


def unify_schemas(schemas: Sequence[pa.Schema], names: Sequence[str]) -> pa.Schema:
    """One schema for every file, with Arrow's permissive promotion, or an error naming files and columns."""
    import pyarrow as pa

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
        (
            "Expected the source files to have schemas Arrow can unify. Got "
            + ", ".join(problems)
            + " instead; cast the columns to one type, or ",
            Argument("columns", ..., passed=True),
            " to leave them out.",
        )
    )


@dataclass(frozen=True)
class ParquetListing:
    """The Parquet files ``src`` names now, found by listing alone: no file is read."""

    kind: ClassVar[str] = "parquet"
    #: Each file's path, hive partition and size (see :func:`_expand`).
    found: list[tuple[str, Any, int]]
    where: Location
    #: The ``src`` items, as the store records them.
    sources: list[str]
    #: The files' identity (names, sizes, versions), as a shuffle of them records it.
    identity: list[dict[str, Any]]

    def identify_again(self) -> list[dict[str, Any]]:
        """The same files' identity, asked of the storage again."""
        fs, paths = self.where.fs, [path for path, _, _ in self.found]
        return identify_files(fs, paths, [entry["name"] for entry in self.identity], fresh=True)


def list_parquet_sources(
    src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], storage_options: dict[str, Any] | None = None
) -> ParquetListing:
    """The Parquet files ``src`` names now and their identity, from a listing: no file is read.

    Examples
    --------
    >>> listing = list_parquet_sources("raw.parquet")
    >>> [(entry["files"], entry["bytes"] > 0) for entry in listing.identity]
    [(1, True)]
    """
    items = parse_sources(src, "Parquet file")
    protocols = {type(Location.of(item, storage_options).fs).__name__ for item in items}
    if len(protocols) > 1:
        raise DaskShuffleValueError(
            f"Expected every source on one filesystem. Got {sorted(protocols)} instead; copy them to one place first."
        )
    found = [entry for item in items for entry in _expand(item, storage_options)]
    where = Location.of(items[0], storage_options)
    paths, fs = [path for path, _, _ in found], where.fs  # one look a file (on object storage, from the listing)
    return ParquetListing(
        found=found,
        where=where,
        sources=[normalize(item) for item in items],
        identity=identify_files(fs, paths, [path if where.is_local else fs.unstrip_protocol(path) for path in paths]),
    )


def open_parquet_sources(
    src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | ParquetListing,
    *,
    columns: Sequence[str] | None,
    block_nbytes: int,
    writing: ParquetWriting,
    storage_options: dict[str, Any] | None = None,
) -> ParquetFormat:
    """Inspect every source file (listed first unless ``src`` is a listing); raise before anything is written."""
    import pyarrow as pa

    listing = src if isinstance(src, ParquetListing) else list_parquet_sources(src, storage_options)
    afs, _ = arrow_filesystem(listing.where)
    files = _inspect_all(listing.found, listing.where)
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
        nbytes = [sum(size for name, size in sizes.items() if name in names) for sizes in file.row_group_nbytes]
        total_nbytes += sum(nbytes)
        for run in whole_runs(nbytes, block_nbytes):
            blocks.append((index, tuple(run)))
            lengths.append(sum(file.row_group_rows[group] for group in run))
    spans = [_block_spans(files[index], row_groups, names) for index, row_groups in blocks]
    n_rows = sum(lengths)
    return ParquetFormat(
        filesystem=afs,
        files=[(file.path, file.partition) for file in files],
        source_names=listing.sources,
        identity=listing.identity,
        identify=listing.identify_again,
        blocks=blocks,
        spans=spans,
        lengths=lengths,
        schema=schema,
        row_nbytes=max(1, -(-total_nbytes // max(n_rows, 1))),
        writing=writing,
    )


class ParquetFormat(ArrowTables, FileSource["pa.Table"]):
    """Parquet files, read a run of row groups at a time."""

    def __init__(
        self,
        *,
        filesystem: pafs.FileSystem,
        files: list[tuple[str, Any]],
        blocks: list[tuple[int, tuple[int, ...]]],
        spans: list[tuple[tuple[int, int], ...]],
        **table: Any,
    ) -> None:
        super().__init__(**table)
        self.filesystem = filesystem
        self.files = files
        self.blocks = blocks
        self.spans = spans  # a remote block's byte ranges: see _block_spans

    def read_block(self, block: int) -> pa.Table:
        import pyarrow as pa

        index, row_groups = self.blocks[block]
        path, partition = self.files[index]
        try:
            if not self.spans[block]:  # a local file: pyarrow reads it itself
                return self._read_fragment(path, partition, row_groups, filesystem=self.filesystem)
            # Remote: every byte range of the block and the footer at once, large ones in several requests (one
            # request streams at one connection's speed), rather than one ranged request after another.
            range_nbytes = int_setting("shuffle.parquet-range-nbytes")
            fetched = fetch_spans(self.filesystem.handler.fs, path, self.spans[block], range_nbytes)
            try:
                with pa.PythonFile(FetchedFile(fetched), mode="r") as file:
                    return self._read_fragment(file, partition, row_groups)
            except NotFetchedError:  # a writer that put a column chunk outside the bytes its footer gives
                fs = self.filesystem.handler.fs
                where = Location.of(fs.unstrip_protocol(path), fs.storage_options)
                with where.reading(buffer_nbytes=range_nbytes) as whole, pa.PythonFile(whole, mode="r") as file:
                    return self._read_fragment(file, partition, row_groups)
        except (pa.ArrowInvalid, OSError) as error:
            raise_storage_failure(error, path, what=path)  # not served: nothing is damaged
            if not undecodable_parquet(error):
                raise
            groups = f"row group {row_groups[0]}" + (f" to {row_groups[-1]}" if len(row_groups) > 1 else "")
            raise undecodable(f"{groups} of {path!r}", error) from error

    def _read_fragment(
        self, source: Any, partition: Any, row_groups: Sequence[int], filesystem: Any = None
    ) -> pa.Table:
        import pyarrow.dataset as pads

        fragment = pads.ParquetFileFormat().make_fragment(
            source, filesystem=filesystem, partition_expression=partition, row_groups=list(row_groups)
        )
        # The scanner fills missing columns with nulls, adds partition columns and casts to the unified schema.
        table = fragment.to_table(schema=self.schema, columns=self.schema.names)
        return table.replace_schema_metadata(self.schema.metadata)
