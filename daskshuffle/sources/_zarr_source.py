"""Zarr sources, opened and checked before anything is written, cut into blocks, read a block at a time."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from .._compat import made_with
from .._config import int_setting
from .._errors import Argument, DaskShuffleTypeError, DaskShuffleValueError, SourceNotFoundError, StorageAccessError
from ..formats import ARRAY_KINDS, ArrayRows, FileSource, Variable, read_in_runs
from ..pilestore import METADATA_KEY, bounded_node, sample_rows, zarr_store
from ..plan import block_rows
from ..storage import Location, identify_files, identify_tree, reaching
from ._arrays import ArrayFormat
from ._undecodable import decoded_chunks, describe, stored

if TYPE_CHECKING:
    import zarr

__all__ = [
    "ROW_DIMENSION",
    "SourceLike",
    "ZarrFormat",
    "check_rows",
    "identify_paths",
    "open_zarr_sources",
    "select_variables",
]

T = TypeVar("T")

SourceLike: TypeAlias = "str | os.PathLike[str] | zarr.Group | zarr.Array[Any]"


def _open(source: SourceLike, storage_options: dict[str, Any] | None) -> zarr.Group | zarr.Array[Any]:
    import zarr

    if isinstance(source, zarr.Group | zarr.Array):  # its reads, here and in the tasks, within the deadline
        try:
            with reaching(describe(source)):
                return bounded_node(source)
        except StorageAccessError:
            raise
        except FileNotFoundError as error:  # zarr's NodeNotFoundError is one
            # Never read as it was opened: zarr gives the fill value for every chunk of a store removed since.
            raise SourceNotFoundError(
                f"Expected src to be a Zarr group or array still in its store. Got {type(source).__name__} "
                f"{describe(source)!r}, whose metadata is no longer there ({type(error).__name__}), instead; open it "
                "again where it is now."
            ) from error
        except (ValueError, KeyError) as error:  # its metadata is there, but changed since into what zarr cannot read
            raise DaskShuffleValueError(
                f"Expected src to be a Zarr group or array whose metadata zarr reads. Got {type(source).__name__} "
                f"{describe(source)!r}, which zarr cannot open again ({type(error).__name__}: {error}), instead; "
                "check what changed its store since it was opened."
            ) from error
    if not isinstance(source, str | os.PathLike):
        raise DaskShuffleTypeError(
            "Expected src to be a path or URL, a zarr.Group, a zarr.Array or a list of them, a dask array, or a "
            f"dict of dask arrays. Got {type(source).__name__} instead."
        )
    location = Location.of(source, storage_options)
    try:
        with location.reaching():  # a refused or throttled request is not a missing group
            return zarr.open(zarr_store(location, read_only=True), mode="r")  # each request within the deadline
    except StorageAccessError:
        raise
    except (PermissionError, FileNotFoundError, ValueError, KeyError, zarr.errors.BaseZarrError) as error:
        if not location.exists():  # asked only now (a request on object storage); names refused credentials
            raise SourceNotFoundError(
                f"Expected src to be an existing Zarr group or array. Got {os.fspath(source)!r}, which does not "
                "exist, instead."
            ) from None
        # zarr's message names its own store object (StorePath(LocalStore, 'file://...')): say it in the user's terms.
        reason = "no Zarr group or array metadata (zarr.json, .zgroup or .zarray) is there"
        if not isinstance(error, zarr.errors.GroupNotFoundError | zarr.errors.NodeNotFoundError | FileNotFoundError):
            reason = f"zarr cannot open it: {type(error).__name__}"
        raise DaskShuffleValueError(
            f"Expected src to be a Zarr group or array. Got {os.fspath(source)!r}, where {reason}, instead; for "
            "Parquet files use shuffle_parquet (daskshuffle parquet), for text shuffle_lines (daskshuffle lines)."
        ) from error


def select_variables(arrays: dict[str, T], variables: Sequence[str] | None, where: str) -> dict[str, T]:
    """The ``arrays`` that ``variables`` names, in its order (all of them for ``None``)."""
    if variables is None:
        return arrays
    unknown = [name for name in variables if name not in arrays]
    if unknown:
        raise DaskShuffleValueError(
            f"Expected variables to name arrays of {where}. Got unknown {unknown} instead; it has {sorted(arrays)}.",
            parameter="variables",
        )
    return {name: arrays[name] for name in variables}


def check_rows(arrays: Mapping[str, Any], where: str, hint: str = "") -> None:
    """Every array of ``arrays`` (of ``where``) has a first (row) dimension, the same length in all of them."""
    scalar = [name for name, array in arrays.items() if array.ndim == 0]
    if scalar:
        raise DaskShuffleValueError(
            (
                f"Expected every shuffled array to have a first (row) dimension. Got 0-d arrays {scalar} in {where} "
                "instead; ",
                Argument("variables", ..., passed=True),
                " to leave them out.",
            )
        )
    lengths = {name: int(array.shape[0]) for name, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise DaskShuffleValueError(
            (
                f"Expected every array of {where} to have the same number of rows. Got {lengths} instead; {hint}",
                Argument("variables", ..., passed=True),
                " to shuffle only the arrays that share their first dimension.",
            )
        )


def _dataset_hint(arrays: dict[str, zarr.Array[Any]]) -> str:
    """Where every array names its dimensions (written by xarray: a dataset, with coordinates), to shuffle it along one."""
    named = [_dimension_names(array) for array in arrays.values()]
    firsts = [str(names[0]) for names in named if names]
    if not firsts or len(firsts) != len(named):
        return ""
    dim = max(dict.fromkeys(firsts), key=firsts.count)  # the first dimension of most arrays
    return (
        "its arrays name their dimensions (an xarray dataset, with coordinates): shuffle it along one with "
        f"shuffle_xarray(src, dst, dim={dim!r}) (daskshuffle xarray SRC DST --dim {dim}); its arrays' first "
        f"dimensions are {sorted(set(firsts))}. Or "
    )


def _select(
    arrays: dict[str, zarr.Array[Any]], variables: Sequence[str] | None, where: str
) -> dict[str, zarr.Array[Any]]:
    if not arrays:
        raise DaskShuffleValueError(f"Expected src to contain arrays. Got a group without arrays ({where}) instead.")
    arrays = select_variables(arrays, variables, where)
    check_rows(arrays, where, _dataset_hint(arrays))
    for name, array in arrays.items():
        dtype = array.dtype
        if not isinstance(dtype, np.dtype) or dtype.kind not in ARRAY_KINDS or dtype.hasobject:
            raise DaskShuffleTypeError(
                f"Expected array {name!r} of {where} to have a fixed-size numeric, boolean, datetime or "
                f"fixed-length string dtype. Got {dtype} instead; variable-length strings and objects belong in "
                "shuffle_parquet, or store them as fixed-length bytes."
            )
    return arrays


def _dimension_names(array: zarr.Array[Any]) -> tuple[Any, ...] | None:
    """The names of the array's dimensions: Zarr format 3's, or xarray's ``_ARRAY_DIMENSIONS`` in format 2."""
    names = getattr(array.metadata, "dimension_names", None)
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    return tuple(cast(Sequence[Any], names)) if names is not None else None


def _variable(name: str, array: zarr.Array[Any]) -> Variable:
    attributes = dict(array.attrs.asdict())
    attributes.pop("_ARRAY_DIMENSIONS", None)  # how xarray names dims in Zarr format 2
    return Variable(
        name=name,
        dtype=np.dtype(array.dtype),
        row_shape=tuple(array.shape[1:]),
        fill_value=array.fill_value,
        attributes=attributes,
        dimension_names=_dimension_names(array),
    )


#: The name of the row dimension of arrays whose source did not name it (dask arrays, unnamed Zarr arrays).
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
            (
                f"Expected every source to hold the same arrays. Got {sorted(other)} in {where} instead of "
                f"{sorted(first)}; ",
                Argument("variables", ..., passed=True),
                " to shuffle the arrays they share.",
            )
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
    step = block_rows(row_nbytes, block_nbytes, chunk_rows)
    return [(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


#: Chunk files of a source listed, at most, to record its identity (one request per thousand files on object
#: storage). Past this, each array's metadata file alone is recorded: a value rewritten inside a chunk, which
#: leaves the metadata as it was, is then not seen by a rerun (pass ``overwrite=True`` after such a change).
LISTED_CHUNKS = 100_000


def _location(node: zarr.Group | zarr.Array[Any]) -> Location | None:
    """Where ``node`` is, reached with the options of its store's filesystem (a group a user opened has options of its
    own); ``None`` for a store of no files. The filesystem is made anew, not taken from zarr's: that one is
    asynchronous."""
    import zarr

    store = stored(node)
    if not isinstance(store, zarr.storage.FsspecStore | zarr.storage.LocalStore):
        return None
    return Location.of(describe(node), made_with(store.fs) if isinstance(store, zarr.storage.FsspecStore) else None)


def identify_zarr(
    source: zarr.Group | zarr.Array[Any], arrays: dict[str, zarr.Array[Any]], *, fresh: bool = False
) -> list[dict[str, Any]]:
    """The identity of a source and of the ``arrays`` of it read: its metadata file, and every array's files.

    Every chunk file is listed where the arrays hold at most :data:`LISTED_CHUNKS`
    chunks; past that, each array's metadata file alone (``"listed": False``).
    A store of no files (zarr's ``MemoryStore``) records none.
    """
    import zarr

    location = _location(source)
    if location is None:
        return []
    fs, path = location.fs, location.path
    listed = sum(int(array.nchunks) for array in arrays.values()) <= LISTED_CHUNKS

    def entry(node: zarr.Group | zarr.Array[Any], where: str) -> dict[str, Any]:
        if listed and isinstance(node, zarr.Array):
            return identify_tree(fs, where, describe(node), fresh=fresh)
        name = (
            "zarr.json" if node.metadata.zarr_format == 3 else ".zarray" if isinstance(node, zarr.Array) else ".zgroup"
        )
        metadata = identify_files(fs, [f"{where}/{name}"], [describe(node)], fresh=fresh)[0]
        return metadata if isinstance(node, zarr.Group) else {**metadata, "listed": False}

    if isinstance(source, zarr.Array):
        return [entry(source, path)]
    return [entry(source, path)] + [entry(array, f"{path}/{name}") for name, array in arrays.items()]


def identify_paths(
    sources: Sequence[str], storage_options: dict[str, Any] | None, *, fresh: bool = False
) -> list[dict[str, Any]]:
    """The identity of the stores and files a dataset was opened from: a Zarr store's as a Zarr source's."""
    import zarr

    entries = []
    for source in sources:
        location = Location.of(source, storage_options)
        if location.join("zarr.json").exists() or location.join(".zgroup").exists():
            group = zarr.open_group(zarr_store(location, read_only=True), mode="r")
            entries += identify_zarr(group, dict(sorted(group.arrays())), fresh=fresh)
        elif location.exists() and not location.isdir():
            entries += identify_files(location.fs, [location.path], [location.url], fresh=fresh)
    return entries


class ZarrFormat(ArrayFormat, FileSource[ArrayRows]):
    """Zarr arrays that share their first dimension, shuffled together."""

    def __init__(
        self,
        *,
        sources: list[dict[str, zarr.Array[Any]]],
        blocks: list[tuple[int, int, int]],
        source_locations: list[Location] | None = None,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.sources = sources
        self.source_locations = source_locations
        self.blocks = blocks
        self.block_lengths = tuple(stop - start for _, start, stop in blocks)

    def read_block(self, block: int) -> ArrayRows:
        source, start, stop = self.blocks[block]
        run_nbytes = int_setting("shuffle.run-nbytes")
        rows = {}
        for name, array in self.sources[source].items():
            with decoded_chunks(array, start, stop):
                rows[name] = read_in_runs(array, start, stop, run_nbytes)
        return rows

    def _layout_samples(self) -> dict[str, NDArray[Any] | None]:
        n_rows = sum(self.block_lengths)
        samples: dict[str, NDArray[Any] | None] = {}
        for variable in self.variables:
            # The first chunk (or SAMPLE_NBYTES of it): one read, which also finds a source that cannot be read.
            source = self.sources[0][variable.name]
            rows = min(sample_rows(variable.row_nbytes, n_rows), int(source.chunks[0]))
            with decoded_chunks(source, 0, rows):
                samples[variable.name] = np.asarray(source[:rows])
        return samples


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
    import zarr

    items: list[Any] = list(src) if isinstance(src, list | tuple) else [src]
    if not items:
        raise DaskShuffleValueError("Expected src to name at least one Zarr group or array. Got an empty list instead.")
    opened = [_open(item, storage_options) for item in items]
    sources: list[dict[str, zarr.Array[Any]]] = []
    described: list[dict[str, Variable]] = []
    for index, source in enumerate(opened):
        where = describe(source) if len(opened) == 1 else f"source {index} ({describe(source)})"
        held = {source.basename or "data": source} if isinstance(source, zarr.Array) else dict(sorted(source.arrays()))
        arrays = _select(held, variables, where)
        found = {name: _variable(name, array) for name, array in arrays.items()}
        if described:
            _check_same_variables(described[0], found, where)
        sources.append(arrays)
        described.append(found)
    blocks = [
        (index, start, stop)
        for index, arrays in enumerate(sources)
        for start, stop in _block_bounds(arrays, block_nbytes)
    ]
    group_attrs: dict[str, Any] = {}
    if isinstance(opened[0], zarr.Group):
        group_attrs = {key: value for key, value in opened[0].attrs.asdict().items() if key != METADATA_KEY}

    # Nodes a user opened are reached as their stores are (where a node of files).
    reached = [location for location in map(_location, opened) if location is not None]

    def identify(fresh: bool = True) -> list[dict[str, Any]]:
        pairs = zip(opened, sources, strict=True)
        return [entry for source, arrays in pairs for entry in identify_zarr(source, arrays, fresh=fresh)]

    return ZarrFormat(
        sources=sources,
        variables=_name_dimensions(list(described[0].values())),
        blocks=blocks,
        source_locations=None if all(isinstance(item, str | os.PathLike) for item in items) else reached,
        source_names=[describe(source) for source in opened],
        group_attrs=group_attrs,
        identity=identify(fresh=False),
        identify=identify,
        chunk_rows=chunk_rows,
        compressors=compressors,
    )
