"""Zarr arrays and groups: the source, the raw piece files and the pile store.

Rows are a ``dict`` of numpy arrays keyed by variable name, all of the same
length. Every variable of a group is shuffled with one permutation, so the rows
of ``x``, ``y`` and ``id`` stay aligned.

Pieces are raw little-endian bytes, one file per (variable, block): pass 1
writes a block's rows in piece order with one sequential write, and the merge
reads exactly the byte range of the piles it assembles. No codec runs on data
that is written once and read once, and no chunk boundary forces a read of
rows that are not needed.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import zarr
from numpy.typing import NDArray

from .._errors import (
    DaskShuffleTypeError,
    DaskShuffleValueError,
    SourceNotFoundError,
)
from .._paths import exists, filesystem, normalize, url_options
from . import _layout
from ._base import ARRAY_KINDS, Format

__all__ = ["ZarrFormat", "open_zarr_sources"]

ArrayRows = dict[str, NDArray[Any]]
SourceLike = str | os.PathLike[str] | zarr.Group | zarr.Array[Any]

#: The target size of one output chunk (of the widest variable; see ``_layout``).
CHUNK_NBYTES = _layout.CHUNK_NBYTES
#: The smallest output chunk a pile store is given, however small its piles.
MIN_CHUNK_NBYTES = _layout.MIN_CHUNK_NBYTES
#: Source blocks are read in runs of whole chunks of about this size (see ``_read_in_runs``).
READ_NBYTES = 32 * 2**20
#: Pass 1 and the merge read, reorder and write in runs of about this size, so
#: that the buffers of a run stay small next to the block or group they hold.
RUN_NBYTES = 16 * 2**20
_METADATA_KEY = "daskshuffle"


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


def _describe(source: zarr.Group | zarr.Array[Any]) -> str:
    """The URL of a group or array, for messages, metadata and overlap checks."""
    store, path = source.store, source.store_path.path
    fs = getattr(store, "fs", None)
    if fs is None:  # a LocalStore or MemoryStore spells itself as a URL
        return str(source.store_path)
    root = fs.unstrip_protocol(getattr(store, "path", "")).rstrip("/")
    return f"{root}/{path}" if path else root


def _open(source: SourceLike, storage_options: dict[str, Any] | None) -> zarr.Group | zarr.Array[Any]:
    if isinstance(source, zarr.Group | zarr.Array):
        return source
    if not isinstance(source, str | os.PathLike):
        raise DaskShuffleTypeError(
            "Expected src to be a path or URL, a zarr.Group, a zarr.Array or a list of them. "
            f"Got {type(source).__name__} instead."
        )
    if not exists(source, storage_options):
        raise SourceNotFoundError(
            f"Expected src to be an existing Zarr group or array. Got {os.fspath(source)!r}, which does not exist, instead."
        )
    try:
        return zarr.open(normalize(source), mode="r", storage_options=url_options(source, storage_options))
    except (FileNotFoundError, ValueError, KeyError, zarr.errors.BaseZarrError) as error:
        raise DaskShuffleValueError(
            f"Expected src to be a Zarr group or array. Got {os.fspath(source)!r}, which zarr cannot open ({error}), instead."
        ) from error


def _arrays_of(source: zarr.Group | zarr.Array[Any]) -> dict[str, zarr.Array[Any]]:
    if isinstance(source, zarr.Array):
        return {source.basename or "data": source}
    return dict(sorted(source.arrays()))


def _select(
    arrays: dict[str, zarr.Array[Any]], variables: Sequence[str] | None, where: str
) -> dict[str, zarr.Array[Any]]:
    if not arrays:
        raise DaskShuffleValueError(f"Expected src to contain arrays. Got a group without arrays ({where}) instead.")
    if variables is not None:
        unknown = [name for name in variables if name not in arrays]
        if unknown:
            raise DaskShuffleValueError(
                f"Expected variables to name arrays of {where}. Got unknown {unknown} instead; it has {sorted(arrays)}."
            )
        arrays = {name: arrays[name] for name in variables}
    scalar = [name for name, array in arrays.items() if array.ndim == 0]
    if scalar:
        raise DaskShuffleValueError(
            f"Expected every shuffled array to have a first (row) dimension. Got 0-d arrays {scalar} in {where} instead; "
            "pass variables=[...] to leave them out."
        )
    lengths = {name: array.shape[0] for name, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise DaskShuffleValueError(
            f"Expected every array of {where} to have the same number of rows. Got {lengths} instead; "
            "pass variables=[...] to shuffle only the arrays that share their first dimension."
        )
    for name, array in arrays.items():
        dtype = array.dtype
        if not isinstance(dtype, np.dtype) or dtype.kind not in ARRAY_KINDS or dtype.hasobject:
            raise DaskShuffleTypeError(
                f"Expected array {name!r} of {where} to have a fixed-size numeric, boolean, datetime or "
                f"fixed-length string dtype. Got {dtype} instead; variable-length strings and objects belong in "
                "shuffle_parquet, or store them as fixed-length bytes."
            )
    return arrays


def _variable(name: str, array: zarr.Array[Any]) -> Variable:
    attributes = dict(array.attrs.asdict())
    dimension_names = getattr(array.metadata, "dimension_names", None)
    xarray_dims = attributes.pop("_ARRAY_DIMENSIONS", None)  # how xarray names dims in Zarr format 2
    if dimension_names is None and xarray_dims is not None:
        dimension_names = tuple(cast(Sequence[Any], xarray_dims))
    return Variable(
        name=name,
        dtype=np.dtype(array.dtype),
        row_shape=tuple(array.shape[1:]),
        fill_value=array.fill_value,
        attributes=attributes,
        dimension_names=tuple(dimension_names) if dimension_names is not None else None,
    )


#: The name of the row dimension of arrays whose source did not name it.
ROW_DIMENSION = "row"


def _name_dimensions(variables: list[Variable]) -> list[Variable]:
    """Every dimension named, so that ``xarray.open_zarr`` opens the pile store whatever its source.

    Names that exist are kept. An unnamed first (row) dimension takes the name
    the other variables give theirs when they agree, else ``"row"``; another
    unnamed axis ``k`` of variable ``v`` is ``"v_dim_k"``.
    """
    named_rows = {variable.dimension_names[0] for variable in variables if variable.dimension_names}
    row = named_rows.pop() if len(named_rows) == 1 and None not in named_rows else ROW_DIMENSION
    named = []
    for variable in variables:
        given = variable.dimension_names or (None,) * (1 + len(variable.row_shape))
        names = tuple(
            name if name is not None else (row if axis == 0 else f"{variable.name}_dim_{axis}")
            for axis, name in enumerate(given)
        )
        named.append(dataclasses.replace(variable, dimension_names=names))
    return named


def _check_same_variables(first: dict[str, Variable], other: dict[str, Variable], where: str) -> None:
    if set(first) != set(other):
        raise DaskShuffleValueError(
            f"Expected every source to hold the same arrays. Got {sorted(other)} in {where} instead of {sorted(first)}; "
            "pass variables=[...] to shuffle the arrays they share."
        )
    for name, variable in other.items():
        expected = first[name]
        if (variable.dtype, variable.row_shape) != (expected.dtype, expected.row_shape):
            raise DaskShuffleValueError(
                f"Expected array {name!r} to have dtype {expected.dtype} and rows of shape {expected.row_shape} in "
                f"every source. Got dtype {variable.dtype} and rows of shape {variable.row_shape} in {where} instead."
            )


def _block_bounds(arrays: dict[str, zarr.Array[Any]], block_nbytes: int) -> list[tuple[int, int]]:
    """Runs of whole chunks (of the array with the widest rows) of about ``block_nbytes``."""
    n_rows = next(iter(arrays.values())).shape[0]
    if n_rows == 0:
        return []
    widest = max(arrays.values(), key=lambda array: array.dtype.itemsize * int(np.prod(array.shape[1:])))
    chunk_rows = int(widest.chunks[0])
    row_nbytes = sum(array.dtype.itemsize * int(np.prod(array.shape[1:])) for array in arrays.values())
    chunks_per_block = max(1, block_nbytes // max(row_nbytes * chunk_rows, 1))
    step = chunks_per_block * chunk_rows
    return [(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


def open_zarr_sources(
    src: SourceLike | Sequence[SourceLike],
    *,
    variables: Sequence[str] | None = None,
    block_nbytes: int,
    chunk_rows: int | None = None,
    compressors: Any = "auto",
    storage_options: dict[str, Any] | None = None,
) -> ZarrFormat:
    """Open and check every source; raise before anything is written."""
    items: list[Any] = list(src) if isinstance(src, list | tuple) else [src]
    if not items:
        raise DaskShuffleValueError("Expected src to name at least one Zarr group or array. Got an empty list instead.")
    opened = [_open(item, storage_options) for item in items]
    sources: list[dict[str, zarr.Array[Any]]] = []
    described: list[dict[str, Variable]] = []
    for index, source in enumerate(opened):
        where = _describe(source) if len(opened) == 1 else f"source {index} ({_describe(source)})"
        arrays = _select(_arrays_of(source), variables, where)
        found = {name: _variable(name, array) for name, array in arrays.items()}
        if described:
            _check_same_variables(described[0], found, where)
        sources.append(arrays)
        described.append(found)
    names = list(described[0])
    blocks = [
        (index, start, stop)
        for index, arrays in enumerate(sources)
        for start, stop in _block_bounds(arrays, block_nbytes)
    ]
    group_attrs: dict[str, Any] = {}
    if isinstance(opened[0], zarr.Group):
        group_attrs = {key: value for key, value in opened[0].attrs.asdict().items() if key != _METADATA_KEY}
    return ZarrFormat(
        sources=sources,
        variables=_name_dimensions([described[0][name] for name in names]),
        blocks=blocks,
        source_names=[_describe(source) for source in opened],
        group_attrs=group_attrs,
        chunk_rows=chunk_rows,
        compressors=compressors,
        storage_options=storage_options,
    )


def _take(rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
    return {name: np.take(values, index, axis=0) for name, values in rows.items()}


def _concat(parts: Sequence[ArrayRows]) -> ArrayRows:
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def _from_bytes(data: bytes, variable: Variable) -> NDArray[Any]:
    return np.frombuffer(data, dtype=variable.dtype).reshape(-1, *variable.row_shape)


class ZarrFormat(Format[ArrayRows]):
    """Zarr arrays that share their first dimension, shuffled together."""

    kind = "zarr"

    def __init__(
        self,
        *,
        sources: list[dict[str, zarr.Array[Any]]],
        variables: list[Variable],
        blocks: list[tuple[int, int, int]],
        source_names: list[str],
        group_attrs: dict[str, Any],
        chunk_rows: int | None,
        compressors: Any,
        storage_options: dict[str, Any] | None,
    ) -> None:
        self.sources = sources
        self.variables = variables
        self.blocks = blocks
        self.source_names = source_names
        self.group_attrs = group_attrs
        self.compressors = compressors
        self.storage_options = storage_options
        self.chunk_rows_given = chunk_rows is not None
        self.chunk_rows = chunk_rows or max(1, CHUNK_NBYTES // self._widest_row_nbytes)
        self.layout: _layout.Layout | None = None  # chosen by for_plan

    @property
    def _widest_row_nbytes(self) -> int:
        return max(1, *(variable.row_nbytes for variable in self.variables))

    def for_plan(self, pile_rows: float, *, materialize: bool) -> ZarrFormat:
        """The destination's layout for piles of ``pile_rows`` rows (see :mod:`._layout`).

        Chunk rows per variable (a materialized copy is read sequentially and
        gets ``CHUNK_NBYTES`` chunks), a codec chosen from a sample of the
        first source, a crc32c per chunk.
        """
        samples: dict[str, NDArray[Any] | None] = {}
        n_rows = sum(self.block_lengths)
        for variable in self.variables:
            arrays = self.sources[0] if self.sources else {}
            if variable.name not in arrays:
                samples[variable.name] = None
                continue
            # The first chunk (or SAMPLE_NBYTES of it): one read, which also finds a source that cannot be read.
            source = arrays[variable.name]
            rows = min(_layout.sample_rows(variable.row_nbytes, n_rows), int(source.chunks[0]))
            samples[variable.name] = np.asarray(source[:rows])
        layout = _layout.choose_layout(
            {variable.name: variable.row_nbytes for variable in self.variables},
            samples,
            None if materialize else pile_rows,
            chunk_rows=self.chunk_rows if self.chunk_rows_given else None,
            compressors=self.compressors,
        )
        # A shallow copy that keeps what pickling drops (an xarray template stays with the planner).
        adapted = object.__new__(type(self))
        adapted.__dict__.update(self.__dict__)
        adapted.layout = layout
        adapted.chunk_rows = layout.alignment()
        return adapted

    # -- the source ----------------------------------------------------------
    @property
    def block_lengths(self) -> tuple[int, ...]:
        return tuple(stop - start for _, start, stop in self.blocks)

    @property
    def row_nbytes(self) -> int:
        return sum(variable.row_nbytes for variable in self.variables)

    def read_block(self, block: int) -> ArrayRows:
        source, start, stop = self.blocks[block]
        return {name: _read_in_runs(array, start, stop, RUN_NBYTES) for name, array in self.sources[source].items()}

    def describe_source(self) -> list[Any]:
        return list(self.source_names)

    # -- rows in memory ------------------------------------------------------
    def take(self, rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
        return _take(rows, index)

    def concat(self, parts: Sequence[ArrayRows]) -> ArrayRows:
        return _concat(parts)

    def slice(self, rows: ArrayRows, start: int, stop: int) -> ArrayRows:
        return {name: values[start:stop] for name, values in rows.items()}

    # -- pieces --------------------------------------------------------------
    def _piece_path(self, tmp: str, variable: Variable, block: int) -> str:
        return f"{tmp}/{variable.name}/{block}.bin"

    def prepare_pieces(self, tmp: str) -> None:
        fs, root = filesystem(tmp, self.storage_options)
        for variable in self.variables:
            fs.makedirs(f"{root}/{variable.name}", exist_ok=True)

    def write_pieces(self, tmp: str, block: int, rows: ArrayRows, piece_offsets: NDArray[np.int64]) -> None:
        fs, root = filesystem(tmp, self.storage_options)
        for variable in self.variables:
            with fs.open(self._piece_path(root, variable, block), "wb") as file:
                file.write(np.ascontiguousarray(rows[variable.name]).reshape(-1).view(np.uint8))

    def scatter_block(
        self, tmp: str, block: int, rows: ArrayRows, order: NDArray[np.intp], piece_offsets: NDArray[np.int64]
    ) -> None:
        # Reorder and write a run at a time: the block is never held twice.
        fs, root = filesystem(tmp, self.storage_options)
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

    def read_pieces(self, tmp: str, block: int, start: int, stop: int) -> ArrayRows:
        fs, root = filesystem(tmp, self.storage_options)
        return {
            variable.name: self._read_piece_rows(fs, root, variable, block, start, stop) for variable in self.variables
        }

    def gather_pieces(self, tmp: str, reads: Sequence[tuple[int, int, int]], order: NDArray[np.intp]) -> ArrayRows:
        # Each read lands straight in its final rows: one copy of the group in
        # memory, not a concatenation to reorder.
        destination = np.empty(len(order), dtype=np.intp)
        destination[order] = np.arange(len(order), dtype=np.intp)
        fs, root = filesystem(tmp, self.storage_options)
        rows = {}
        for variable in self.variables:
            values = np.empty((len(order), *variable.row_shape), dtype=variable.dtype)
            filled = 0
            for block, start, stop in reads:
                part = self._read_piece_rows(fs, root, variable, block, start, stop)
                values[destination[filled : filled + len(part)]] = part
                filled += len(part)
            rows[variable.name] = values
        return rows

    # -- the destination -----------------------------------------------------
    def write_alignment(self) -> int:
        return self._chosen_layout().alignment()

    def _chosen_layout(self) -> _layout.Layout:
        if self.layout is not None:
            return self.layout
        # Not planned (for_plan not called): every variable in chunks of ``chunk_rows``, no codec.
        return _layout.choose_layout(
            {variable.name: variable.row_nbytes for variable in self.variables},
            {},
            None,
            chunk_rows=self.chunk_rows,
            compressors=self.compressors,
        )

    def create_destination(self, dst: str, n_rows: int, metadata: Mapping[str, Any]) -> None:
        layout = self._chosen_layout()
        group = zarr.open_group(
            dst,
            mode="w",
            zarr_format=3,
            storage_options=url_options(dst, self.storage_options),
            attributes={**self.group_attrs, _METADATA_KEY: {**metadata, _layout.LAYOUT_KEY: layout.to_dict()}},
        )
        _layout.create_arrays(group, self.variables, layout, n_rows, self.compressors)

    def write_rows(self, dst: str, start: int, rows: ArrayRows, piece_info: Any) -> None:
        group = zarr.open_group(dst, mode="r+", storage_options=url_options(dst, self.storage_options))
        for name, values in rows.items():
            _write_in_runs(_layout.for_writing(group[name]), start, values)

    def finalize_destination(self, dst: str, metadata: Mapping[str, Any]) -> None:
        group = zarr.open_group(dst, mode="r+", storage_options=url_options(dst, self.storage_options))
        group.attrs[_METADATA_KEY] = {**metadata, _layout.LAYOUT_KEY: self._chosen_layout().to_dict()}
        with warnings.catch_warnings():
            # Consolidated metadata lets xarray open the store without probing every array.
            warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
            zarr.consolidate_metadata(group.store)


def _run_rows(array: zarr.Array[Any], run_nbytes: int) -> int:
    """Rows in a run of whole chunks of about ``run_nbytes``."""
    chunk_rows = int(array.chunks[0])
    row_nbytes = array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
    return max(1, run_nbytes // max(row_nbytes * chunk_rows, 1)) * chunk_rows


def _write_in_runs(array: zarr.Array[Any], start: int, values: NDArray[Any]) -> None:
    """Write ``values`` at row ``start`` (a chunk boundary) in runs of about ``RUN_NBYTES``.

    zarr encodes the chunks of one write concurrently and holds every encoded
    chunk until it is stored: writing a whole group at once takes about twice
    its size. Runs bound the encoded chunks to one run.
    """
    run_rows = _run_rows(array, RUN_NBYTES)
    for first in range(0, len(values), run_rows):
        last = min(first + run_rows, len(values))
        array[start + first : start + last] = values[first:last]


def _read_in_runs(array: zarr.Array[Any], start: int, stop: int, run_nbytes: int = READ_NBYTES) -> NDArray[Any]:
    """Rows ``start:stop`` of ``array``, read in runs of whole chunks of about ``run_nbytes``.

    While it reads, zarr holds the compressed and the decoded chunks of a
    selection besides the result: reading a pile at once takes about three
    times its size. Runs bound that to the result plus two runs.
    """
    chunk_rows = int(array.chunks[0])
    run_rows = _run_rows(array, run_nbytes)
    if stop - start <= run_rows:
        return np.asarray(array[start:stop])
    out = np.empty((stop - start, *array.shape[1:]), dtype=array.dtype)
    first = start
    while first < stop:
        last = min((first // chunk_rows) * chunk_rows + run_rows, stop)
        out[first - start : last - start] = array[first:last]
        first = last
    return out
