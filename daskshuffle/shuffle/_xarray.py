"""The public xarray shuffle: rows along one dimension of a dataset, into a Zarr pile store."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from .._errors import DaskShuffleTypeError
from .._parse import parse_positive_int
from ..sources import open_xarray_source
from . import _collections
from ._options import parse_shuffle_options, shared_docs
from ._run import ShuffleResult, run_shuffle

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["shuffle_xarray"]

PathLike = str | os.PathLike[str]


@shared_docs
def shuffle_xarray(
    ds: xr.Dataset | PathLike,
    dst: PathLike,
    dim: str,
    n_piles: int | Literal["auto"] = 512,
    *,
    chunk_rows: int | None = None,
    seed: int | None = None,
    overwrite: bool = False,
    materialize: bool = False,
    pile_memory: int | str = "256MiB",
    block_memory: int | str = "64MiB",
    tmp: str | os.PathLike[str] | None = None,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    verify: bool = False,
    levels: int | Literal["auto"] = "auto",
) -> ShuffleResult:
    """Shuffle an xarray dataset along ``dim`` out of core, with the 2-pass shuffle, on dask.

    Every variable and coordinate along ``dim`` is shuffled with one permutation,
    so they stay aligned; variables without ``dim`` are copied unchanged (through
    the client: they should fit in memory). The result is a Zarr v3 pile store that
    ``xr.open_zarr(dst)`` opens as the same dataset up to the order along ``dim``,
    with its attributes and CF encodings, ready for :class:`daskshuffle.PileLoader`.
    Variables are stored with ``dim`` first: one whose ``dim`` was elsewhere comes
    back transposed.

    Parameters
    ----------
    ds : xarray.Dataset, path or glob
        A dataset, usually lazy and dask-backed, a path xarray opens, or a glob of
        such paths (``"era-*.nc"``), put end to end along ``dim`` in the order of
        their names. Not modified. A file (not a Zarr store) on object storage is
        read as netCDF4 or HDF5 through h5netcdf, each request within the deadline;
        a dataset you opened is read as you opened it.
    dst : path or URL
        Where to write the Zarr v3 pile store.
    dim : str
        The dimension whose positions are the rows to shuffle.
    chunk_rows : int, optional
        Rows per output chunk along ``dim`` for every variable. By default chosen
        from the piles as for :func:`daskshuffle.shuffle_zarr`.
    {n_piles, seed, overwrite, materialize, pile_memory, block_memory, tmp, progress, storage_options, verify}
        The dataset is read again for the check.
    {levels}

    Returns
    -------
    ShuffleResult
        What was written: its path, rows, pile sizes and seed (the one drawn, with ``seed=None``).

    Examples
    --------
    >>> import numpy as np, xarray as xr, daskshuffle
    >>> data = xr.Dataset({"x": (("sample", "feature"), np.random.rand(1000, 8))})
    >>> daskshuffle.shuffle_xarray(data, "shuffled.zarr", "sample", n_piles=8, seed=0)
    <ShuffleResult pile store '...shuffled.zarr': 1,000 rows in 8 piles ...>
    """
    checked = parse_shuffle_options(locals())
    if not isinstance(dim, str):
        raise DaskShuffleTypeError(f"Expected dim to be a dimension name. Got {dim!r} instead.", parameter="dim")
    chosen_rows = parse_positive_int(chunk_rows, "chunk_rows") if chunk_rows is not None else None
    fmt = open_xarray_source(
        ds,
        dim,
        block_nbytes=checked.block_nbytes,
        chunk_rows=chosen_rows,
        storage_options=checked.storage_options,
        block_inputs=_collections.array_inputs,
    )
    return run_shuffle(fmt, checked, variables=[variable.name for variable in fmt.variables])
