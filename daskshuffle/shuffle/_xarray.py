"""The public xarray shuffle: rows along one dimension of a dataset, into a Zarr pile store."""

from __future__ import annotations

import os
from typing import Any, Literal

import xarray as xr

from .._errors import DaskShuffleTypeError
from .._parse import parse_positive_int
from ..formats._xarray import open_xarray_source
from ..plan._options import DEFAULT_BLOCK_MEMORY, DEFAULT_N_PILES, DEFAULT_PILE_MEMORY, common_options
from . import _compute
from ._run import ShuffleResult, run_shuffle, shuffle_options

__all__ = ["shuffle_xarray"]

PathLike = str | os.PathLike[str]


@common_options(notes={"verify": "The dataset is read again for the check."})
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
    verify: bool = False,
    levels: int | Literal["auto"] = "auto",
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
    {options: n_piles, seed, overwrite, materialize, pile_memory, block_memory}
    chunk_rows : int, optional
        Rows per output chunk along ``dim`` for every variable. By default chosen
        from the piles as for :func:`daskshuffle.shuffle_zarr`: a sixteenth of a
        pile of the widest variable (between 256 KiB and 4 MiB), narrow variables
        in a few times as many rows.
    {options: tmp, progress, storage_options, verify, levels}

    Returns
    -------
    ShuffleResult

    Examples
    --------
    >>> import numpy as np, xarray as xr, daskshuffle
    >>> data = xr.Dataset({"x": (("sample", "feature"), np.random.rand(1000, 8))})
    >>> daskshuffle.shuffle_xarray(data, "shuffled.zarr", "sample", n_piles=8, seed=0)
    <ShuffleResult pile store '...shuffled.zarr': 1,000 rows in 8 piles ...>
    """
    options = shuffle_options(locals())
    if not isinstance(dim, str):
        raise DaskShuffleTypeError(f"Expected dim to be a dimension name. Got {dim!r} instead.", parameter="dim")
    chosen_rows = parse_positive_int(chunk_rows, "chunk_rows") if chunk_rows is not None else None
    fmt = open_xarray_source(
        ds,
        dim,
        block_nbytes=options.block_nbytes,
        chunk_rows=chosen_rows,
        storage_options=options.storage_options,
        block_inputs=_compute.array_inputs,
    )
    return run_shuffle(fmt, options, variables=[variable.name for variable in fmt.variables])
