"""The public xarray shuffle: rows along one dimension of a dataset, into a Zarr pile store."""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import numpy as np
import xarray as xr

from . import _graph, _paths
from ._errors import DaskShuffleTypeError, DaskShuffleValueError, SourceNotFoundError
from ._options import DEFAULT_BLOCK_MEMORY, DEFAULT_N_PILES, DEFAULT_PILE_MEMORY, parse_shuffle_options
from ._parse import parse_positive_int
from ._run import ShuffleResult, run_shuffle
from .formats._base import NUMERIC_KINDS
from .formats._xarray import XarrayFormat
from .formats._zarr import CHUNK_NBYTES, Variable

__all__ = ["shuffle_xarray"]

PathLike = str | os.PathLike[str]
#: The encodings that describe values (CF conventions); chunking and codecs are the destination's own.
_VALUE_ENCODINGS = ("dtype", "_FillValue", "missing_value", "scale_factor", "add_offset", "units", "calendar")


def _open(ds: object, storage_options: dict[str, Any] | None) -> tuple[xr.Dataset, list[str]]:
    if isinstance(ds, xr.Dataset):
        source = ds.encoding.get("source")
        return ds, [source] if isinstance(source, str) else []
    if not isinstance(ds, str | os.PathLike):
        raise DaskShuffleTypeError(f"Expected ds to be an xarray.Dataset or a path. Got {type(ds).__name__} instead.")
    path = os.fspath(ds)
    if not _paths.exists(path, storage_options):
        raise SourceNotFoundError(
            f"Expected ds to be an existing dataset. Got {path!r}, which does not exist, instead."
        )
    root = _paths.normalize(path)
    try:
        if _paths.exists(f"{root}/zarr.json", storage_options) or _paths.exists(f"{root}/.zgroup", storage_options):
            # Consolidated metadata if the store has it, without xarray's warning when it does not.
            consolidated = _paths.exists(f"{root}/.zmetadata", storage_options) or _has_consolidated_v3(
                root, storage_options
            )
            opened = xr.open_zarr(path, consolidated=consolidated, storage_options=storage_options)
        else:
            opened = xr.open_dataset(path, chunks={})
    except (OSError, ValueError, TypeError) as error:
        raise DaskShuffleValueError(
            f"Expected ds to be a dataset xarray opens. Got {path!r}, which it cannot open ({error}), instead."
        ) from error
    return opened, [_paths.normalize(path)]


def _has_consolidated_v3(root: str, storage_options: dict[str, Any] | None) -> bool:
    fs, inner = _paths.filesystem(root, storage_options)
    try:
        with fs.open(f"{inner}/zarr.json", "r") as file:
            return json.load(file).get("consolidated_metadata") is not None
    except (FileNotFoundError, ValueError):
        return False


def _value_encoding(variable: xr.Variable) -> dict[str, Any]:
    return {key: variable.encoding[key] for key in _VALUE_ENCODINGS if key in variable.encoding}


def _block_lengths(chunks: tuple[int, ...], row_nbytes: int, block_nbytes: int) -> list[int]:
    """Runs of whole source chunks along ``dim`` of about ``block_nbytes`` (chunks may be irregular)."""
    lengths: list[int] = []
    filled = 0
    for size in chunks:
        if lengths and filled and (filled + size) * row_nbytes > block_nbytes:
            filled = 0
        if filled == 0:
            lengths.append(0)
        lengths[-1] += size
        filled += size
    return [length for length in lengths if length]


def xarray_format(
    dataset: xr.Dataset,
    dim: str,
    *,
    sources: list[str],
    block_nbytes: int,
    chunk_rows: int | None,
    storage_options: dict[str, Any] | None,
) -> XarrayFormat:
    """The format of ``dataset`` along ``dim``: variables checked, blocks cut, destination laid out."""
    along = {
        str(name): variable.transpose(dim, ...) for name, variable in dataset.variables.items() if dim in variable.dims
    }
    for name, variable in along.items():
        if variable.dtype.kind not in NUMERIC_KINDS:
            raise DaskShuffleTypeError(
                f"Expected every variable along {dim!r} to have a numeric, boolean or datetime dtype. Got {name!r} "
                f"of dtype {variable.dtype} instead; drop it (ds.drop_vars) or encode it as numbers first."
            )
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
    widest = max(variable.row_nbytes for variable in variables)
    out_rows = chunk_rows or max(1, CHUNK_NBYTES // max(widest, 1))
    n_rows = dataset.sizes[dim]
    chunked = [variable for variable in along.values() if variable.chunks is not None]
    source_chunks = tuple(chunked[0].chunksizes[dim]) if chunked else (n_rows,)
    lengths = _block_lengths(source_chunks, row_nbytes, block_nbytes) if n_rows else []
    # The source's own tasks compute each block, every variable cut at the same rows.
    inputs = (
        _graph.array_inputs(
            {name: variable.to_base_variable().chunk().data for name, variable in along.items()}, lengths
        )
        if lengths
        else ({}, [])
    )

    template = xr.Dataset(attrs=dict(dataset.attrs))
    for key, variable in dataset.variables.items():
        name = str(key)
        if dim in variable.dims:
            copy = along[name].chunk({d: out_rows if d == dim else -1 for d in along[name].dims})
            copy.encoding = {**_value_encoding(variable), "chunks": (out_rows, *copy.shape[1:])}
        else:
            copy = variable.copy(deep=False).load()  # written whole by create_destination
            copy.encoding = _value_encoding(variable)
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
        storage_options=storage_options,
    )


def shuffle_xarray(
    ds: xr.Dataset | PathLike,
    dst: PathLike,
    dim: str,
    n_piles: int | Literal["auto"] = DEFAULT_N_PILES,
    *,
    seed: int | None = None,
    overwrite: bool = False,
    materialize: bool = False,
    pile_memory: int | str = DEFAULT_PILE_MEMORY,
    block_memory: int | str = DEFAULT_BLOCK_MEMORY,
    chunk_rows: int | None = None,
    tmp: PathLike | None = None,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> ShuffleResult:
    """Shuffle an xarray dataset along ``dim`` out of core, with the 2-pass shuffle, on dask.

    Every variable and coordinate along ``dim`` is shuffled with one
    permutation, so they stay aligned; variables without ``dim`` are copied
    unchanged (through the client: they should fit in memory). The result is a
    Zarr v3 pile store that ``xr.open_zarr(dst)`` opens as the same dataset up
    to the order along ``dim``, with its attributes and CF encodings (time
    units, fill values, scale and offset), ready for
    :class:`daskshuffle.PileLoader`. Variables along ``dim`` are stored with
    ``dim`` first (one row contiguous); one whose ``dim`` was elsewhere comes
    back transposed.

    Parameters
    ----------
    ds : xarray.Dataset or path
        A dataset, usually lazy and dask-backed (``xr.open_zarr``,
        ``xr.open_mfdataset``), or a path xarray opens. Its chunks along
        ``dim`` may be irregular. Not modified.
    dst : path or URL
        Where to write the Zarr v3 pile store.
    dim : str
        The dimension whose positions are the rows to shuffle.
    n_piles, seed, overwrite, materialize, pile_memory, block_memory, tmp, progress, storage_options
        As for :func:`daskshuffle.shuffle_zarr`.
    chunk_rows : int, optional
        Rows per output chunk along ``dim`` for every variable. By default chosen
        from the piles as for :func:`daskshuffle.shuffle_zarr`: a sixteenth of a
        pile of the widest variable (between 256 KiB and 4 MiB), narrow variables
        in a few times as many rows.

    Returns
    -------
    ShuffleResult

    Examples
    --------
    >>> import numpy as np, xarray as xr, daskshuffle
    >>> data = xr.Dataset({"x": (("sample", "feature"), np.random.rand(1000, 8))})
    >>> daskshuffle.shuffle_xarray(data, "shuffled.zarr", "sample", n_piles=8, seed=0)
    <ShuffleResult pile store 'shuffled.zarr': 1,000 rows in 8 piles ...>
    """
    if not isinstance(dim, str):
        raise DaskShuffleTypeError(f"Expected dim to be a dimension name. Got {dim!r} instead.")
    options = parse_shuffle_options(
        dst=dst,
        n_piles=n_piles,
        seed=seed,
        overwrite=overwrite,
        materialize=materialize,
        pile_memory=pile_memory,
        block_memory=block_memory,
        tmp=tmp,
        progress=progress,
        storage_options=storage_options,
    )
    chosen_rows = parse_positive_int(chunk_rows, "chunk_rows") if chunk_rows is not None else None
    dataset, sources = _open(ds, storage_options)
    if dim not in dataset.dims:
        raise DaskShuffleValueError(
            f"Expected dim to be a dimension of the dataset. Got {dim!r} instead; it has {sorted(map(str, dataset.dims))}."
        )
    fmt = xarray_format(
        dataset,
        dim,
        sources=sources,
        block_nbytes=options.block_nbytes,
        chunk_rows=chosen_rows,
        storage_options=storage_options,
    )
    return run_shuffle(fmt, options, variables=[variable.name for variable in fmt.variables])
