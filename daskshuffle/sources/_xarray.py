"""xarray datasets: rows along one dimension, shuffled into a Zarr pile store.

Every variable along ``dim`` is shuffled with one permutation, as the decoded values xarray gives, read by the
dataset's own dask tasks in blocks that follow its chunks. The destination is written by xarray itself, so that
``xr.open_zarr(dst)`` gives back the dataset (attributes, CF encodings, the variables without ``dim``) up to the
order along ``dim``; variables along ``dim`` are stored with ``dim`` first, so that a row is contiguous.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import pilestore as _layout
from .._errors import DaskShuffleError, DaskShuffleTypeError, DaskShuffleValueError
from ..formats import NUMERIC_KINDS, ArrayRows, CollectionSource, Variable
from ..pilestore import METADATA_KEY, metadata_attribute, zarr_store
from ..storage import Location, bounded, identify_token
from ._arrays import ArrayFormat
from ._found import found
from ._parquet import whole_runs
from ._undecodable import undecodable_group
from ._zarr_source import ROW_DIMENSION, check_rows, identify_paths, select_variables

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["ARRAY_NAME", "XarrayFormat", "open_arrays_source", "open_xarray_source"]

#: The variable a single array becomes, as an unnamed Zarr array does.
ARRAY_NAME = "data"

#: Turns ``{name: dask array}`` cut at block ``lengths`` into the graph and keys of the blocks.
BlockInputs = Callable[[dict[str, Any], list[int]], tuple[dict[Any, Any], list[Any]]]

#: The encodings that describe values (CF conventions); chunking and codecs are the destination's own.
_VALUE_ENCODINGS = ("dtype", "_FillValue", "missing_value", "scale_factor", "add_offset", "units", "calendar")


def open_dataset(ds: object, storage_options: dict[str, Any] | None, dim: str) -> tuple[xr.Dataset, list[str]]:
    """``ds`` opened: a dataset as it is, a path (a Zarr store or a file), or a glob of them put end to end along ``dim``."""
    import xarray as xr

    if isinstance(ds, xr.Dataset):
        source = ds.encoding.get("source")
        return ds, [source] if isinstance(source, str) else []
    if not isinstance(ds, str | os.PathLike | Location):
        raise DaskShuffleTypeError(f"Expected ds to be an xarray.Dataset or a path. Got {type(ds).__name__} instead.")
    root = Location.of(ds, storage_options)
    what = "a dataset: a Zarr store, a file xarray opens, or a glob of them"
    matched, _ = found(root, ds, what, argument="ds", files_only=False)
    if matched is None:
        return _open_one(root, ds), [root.url]
    # As open_mfdataset(paths, combine="nested", concat_dim=dim): the files in the order of their names.
    urls = [root.fs.unstrip_protocol(match) if not root.is_local else match for match in matched]
    parts = [_open_one(Location.of(url, storage_options), url) for url in urls]
    combined = xr.combine_nested(parts, concat_dim=dim, data_vars="minimal", coords="minimal", compat="override")
    return combined, urls


def _open_one(root: Location, ds: object) -> xr.Dataset:
    import xarray as xr
    import zarr

    try:
        with root.reaching():
            if root.join("zarr.json").exists() or root.join(".zgroup").exists():
                # Consolidated metadata if the store has it, without xarray's warning when it does not.
                consolidated = root.join(".zmetadata").exists() or _has_consolidated_v3(root)
                store = zarr_store(root, read_only=True)  # its chunks too read within the request deadline
                try:
                    opened = xr.open_zarr(store, consolidated=consolidated)
                except (RuntimeError, zlib.error) as error:  # an index xarray reads on opening does not decode
                    raise undecodable_group(zarr.open_group(store, mode="r"), root.url, error) from error
            elif root.is_local:
                opened = xr.open_dataset(root.url, chunks={})
            else:
                opened = _open_remote_file(root)
    except (OSError, ValueError, TypeError) as error:
        if isinstance(error, DaskShuffleError):
            raise
        hint = "" if root.is_local else f"; {_REMOTE_FILES}: copy it to a local disk, or convert it to Zarr"
        raise DaskShuffleValueError(
            f"Expected ds to be a dataset xarray opens. Got {str(ds)!r}, which it cannot open ({error}), instead{hint}."
        ) from error
    dataset: xr.Dataset = opened
    return dataset


#: What a file (not a Zarr store) on object storage may be, and how it is read.
_REMOTE_FILES = "a file on object storage is read as netCDF4 or HDF5, through h5netcdf"


def _open_remote_file(root: Location) -> xr.Dataset:
    """The file at ``root``, on object storage, opened by xarray through h5netcdf a range at a time: each request
    within the deadline, the file opened again by the dataset's tasks wherever they run.

    h5netcdf reads a file object by its chunks; the other engines that take one
    read it whole (scipy, netCDF3) or not at all (netCDF4, which needs a path).
    """
    import xarray as xr

    try:
        import h5netcdf  # noqa: F401
    except ImportError as error:
        raise ImportError(f"{_REMOTE_FILES}, which is not installed: pip install 'daskshuffle[netcdf]'") from error
    file: Any = root.opened(buffer_nbytes=2**20)  # a file object, as xarray's ReadBuffer but for its typing
    opened: xr.Dataset = xr.open_dataset(file, engine="h5netcdf", chunks={})
    return opened


def _has_consolidated_v3(root: Location) -> bool:
    try:
        metadata = json.loads(bounded(root.fs, "cat_file", root.join("zarr.json").path, what="zarr.json"))
        return metadata.get("consolidated_metadata") is not None
    except (FileNotFoundError, ValueError):
        return False


def _block_lengths(chunks: tuple[int, ...], row_nbytes: int, block_nbytes: int) -> list[int]:
    """Runs of whole source chunks along ``dim`` of about ``block_nbytes`` (chunks may be irregular)."""
    runs = whole_runs([size * row_nbytes for size in chunks], block_nbytes)
    return [length for run in runs if (length := sum(chunks[chunk] for chunk in run))]


class XarrayFormat(ArrayFormat, CollectionSource[ArrayRows]):
    """The variables of an xarray dataset along one dimension, shuffled together.

    ``template`` (the destination's layout, lazily backed by the source) stays
    with the caller, as ``inputs`` (the graph of the blocks) does: it is not
    pickled into the tasks.
    """

    def __init__(
        self,
        *,
        dim: str,
        template: xr.Dataset,
        inputs: tuple[dict[Any, Any], list[Any]],
        lengths: list[int],
        **common: Any,
    ) -> None:
        super().__init__(group_attrs={}, compressors="auto", **common)
        self.dim = dim
        self.block_lengths = tuple(lengths)
        self._template: xr.Dataset | None = template
        self._inputs = inputs

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_template": None}

    def rows_of_block(self, block: int, value: Any) -> ArrayRows:
        return {variable.name: np.asarray(value[variable.name], dtype=variable.dtype) for variable in self.variables}

    def create_destination(self, dst: Location, n_rows: int, metadata: Mapping[str, Any]) -> None:
        if self._template is None:
            raise RuntimeError("create_destination runs where the shuffle was planned, with its template")
        # xarray writes the layout, the encodings and the variables without ``dim``;
        # the rows along ``dim`` are left to the merge tasks (compute=False).
        layout = self._chosen_layout()
        for variable in self.variables:
            chosen = layout.variables[variable.name]
            stored = self._template.variables[variable.name]
            # The template's dask chunks along ``dim`` must fit the chosen zarr chunks (xarray checks it).
            rechunked = stored.chunk({self.dim: chosen.chunk_rows})
            rechunked.encoding = {
                **stored.encoding,
                **_layout.xarray_encoding(chosen, variable.dtype.itemsize, variable.row_shape),
            }
            if variable.name in self._template.coords:
                self._template = self._template.assign_coords({variable.name: rechunked})
            else:
                self._template[variable.name] = rechunked
        with dst.reaching():
            self._template.to_zarr(zarr_store(dst), mode="w", compute=False, zarr_format=3, consolidated=False)
        group = _layout.open_group(dst, mode="r+")
        group.attrs[METADATA_KEY] = metadata_attribute({**metadata, "dim": self.dim})

    def stored_rows(self, dst: Location, rows: ArrayRows) -> ArrayRows:
        """``rows`` with the destination's own encodings (time units, fill values, scales), as xarray applies them,
        in the dtype each array stores (xarray's ``encoding["dtype"]``)."""
        import xarray as xr

        stored = xr.open_zarr(zarr_store(dst, read_only=True), consolidated=False, chunks=None)
        encoded: ArrayRows = {}
        for name, values in rows.items():
            variable = stored.variables[name]
            cf = xr.conventions.encode_cf_variable(
                xr.Variable(variable.dims, values, attrs=variable.attrs, encoding=variable.encoding), name=name
            )
            encoded[name] = np.asarray(cf.values, dtype=variable.encoding["dtype"])
        return encoded

    def write_rows(self, dst: Location, start: int, rows: ArrayRows, piece_info: Any) -> None:
        """Encoded as the destination stores values, written as every Zarr pile store's rows are."""
        super().write_rows(dst, start, self.stored_rows(dst, rows), piece_info)

    def finalize_destination(self, dst: Location, metadata: Mapping[str, Any]) -> None:
        super().finalize_destination(dst, {**metadata, "dim": self.dim})


def _token(arrays: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of dask arrays: their names, which dask derives from what they compute (a token of the values
    for arrays made from memory, of the files and chunks for arrays read from storage)."""
    names = sorted((name, str(array.name)) for name, array in arrays.items())
    return identify_token("dask arrays", hashlib.sha256(repr(names).encode()).hexdigest()[:32])


def open_xarray_source(
    ds: xr.Dataset | str | os.PathLike[str],
    dim: str,
    *,
    block_nbytes: int,
    chunk_rows: int | None,
    storage_options: dict[str, Any] | None,
    block_inputs: BlockInputs,
) -> XarrayFormat:
    """Open and check ``ds`` along ``dim``: variables checked, blocks cut, the destination laid out, identity taken
    of where it was opened from and of its dask arrays.

    ``block_inputs`` builds the graph of the blocks from the dataset's dask
    arrays (the graph layer's ``array_inputs``).
    """
    import xarray as xr

    dataset, sources = open_dataset(ds, storage_options, dim)
    if dim not in dataset.dims:
        raise DaskShuffleValueError(
            f"Expected dim to be a dimension of the dataset. Got {dim!r} instead; it has {sorted(map(str, dataset.dims))}.",
            parameter="dim",
        )
    for name, variable in dataset.variables.items():
        if dim in variable.dims and variable.dtype.kind not in NUMERIC_KINDS:
            raise DaskShuffleTypeError(
                f"Expected every variable along {dim!r} to have a numeric, boolean or datetime dtype. Got {name!r} "
                f"of dtype {variable.dtype} instead; drop it (ds.drop_vars) or encode it as numbers first."
            )
    along = {
        str(name): variable.transpose(dim, ...) for name, variable in dataset.variables.items() if dim in variable.dims
    }
    variables = [
        Variable(
            name=name,
            dtype=np.dtype(variable.dtype),
            row_shape=tuple(variable.shape[1:]),
            fill_value=None,
            attributes={},
            dimension_names=tuple(map(str, variable.dims)),
        )
        for name, variable in along.items()
    ]
    row_nbytes = sum(variable.row_nbytes for variable in variables)
    n_rows = dataset.sizes[dim]
    chunked = [variable for variable in along.values() if variable.chunks is not None]
    source_chunks = tuple(chunked[0].chunksizes[dim]) if chunked else (n_rows,)
    lengths = _block_lengths(source_chunks, row_nbytes, block_nbytes)
    # The source's own tasks compute each block, every variable cut at the same rows.
    arrays = {name: variable.to_base_variable().chunk().data for name, variable in along.items()}
    inputs = block_inputs(arrays, lengths) if lengths else ({}, [])

    token = [_token(arrays)]
    template = xr.Dataset(attrs=dict(dataset.attrs))
    for key, variable in dataset.variables.items():
        name = str(key)
        if dim in variable.dims:  # chunked along dim as the layout chosen says, by create_destination
            copy = along[name].chunk({other: -1 for other in along[name].dims if other != dim})
        else:
            copy = variable.copy(deep=False).load()  # written whole by create_destination
        copy.encoding = {key: variable.encoding[key] for key in _VALUE_ENCODINGS if key in variable.encoding}
        if name in dataset.coords:
            template = template.assign_coords({name: copy})
        else:
            template[name] = copy
    return XarrayFormat(
        dim=dim,
        template=template,
        inputs=inputs,
        variables=variables,
        lengths=lengths,
        source_names=sources,
        chunk_rows=chunk_rows,
        identity=identify_paths(sources, storage_options) + token,
        identify=lambda: identify_paths(sources, storage_options, fresh=True) + token,
    )


def open_arrays_source(
    arrays: Mapping[str, Any],
    *,
    variables: Sequence[str] | None,
    block_nbytes: int,
    chunk_rows: int | None,
    block_inputs: BlockInputs,
) -> XarrayFormat:
    """Check chunked arrays (``{name: dask array}``) that share their rows; shuffle them as a dataset along ``"row"``.

    They are a dataset without coordinates: each array's first axis is the
    dimension ``"row"``, its others ``"<name>_dim_<k>"`` (as for Zarr arrays
    without dimension names). Blocks follow the first array's chunks along the
    rows; the others are cut at the same rows. Every check runs here, before
    anything is written or computed.
    """
    import xarray as xr

    if not arrays:
        raise DaskShuffleValueError("Expected src to hold at least one array. Got an empty dict instead.")
    arrays = select_variables(dict(arrays), variables, "src")
    unknown_sizes = [name for name, array in arrays.items() if any(math.isnan(size) for size in array.shape)]
    if unknown_sizes:
        raise DaskShuffleValueError(
            f"Expected arrays of known chunk sizes. Got {unknown_sizes} with unknown (nan) sizes instead; call "
            "array.compute_chunk_sizes() first (the plan needs every block's rows before any row moves)."
        )
    check_rows(arrays, "src")
    for name, array in arrays.items():
        dtype = np.dtype(array.dtype)
        if dtype.kind not in NUMERIC_KINDS:
            raise DaskShuffleTypeError(
                f"Expected array {name!r} to have a numeric, boolean or datetime dtype. Got {dtype} instead; "
                "strings and objects belong in shuffle_dataframe, or encode them as numbers first."
            )
    dataset = xr.Dataset(
        {
            name: ((ROW_DIMENSION, *(f"{name}_dim_{axis}" for axis in range(1, array.ndim))), array)
            for name, array in arrays.items()
        }
    )
    return open_xarray_source(
        dataset,
        ROW_DIMENSION,
        block_nbytes=block_nbytes,
        chunk_rows=chunk_rows,
        storage_options=None,
        block_inputs=block_inputs,
    )
