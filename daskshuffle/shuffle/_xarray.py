"""The public xarray shuffle: rows along one dimension of a dataset, into a Zarr pile store."""

from __future__ import annotations

import os
from typing import Literal, Unpack

import xarray as xr

from .._errors import DaskShuffleTypeError
from .._parse import parse_positive_int
from ..plan import DEFAULT_N_PILES, ShuffleKeywords, common_options
from ..sources import open_xarray_source
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
    chunk_rows: int | None = None,
    **options: Unpack[ShuffleKeywords],
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
    ds : xarray.Dataset, path or glob
        A dataset, usually lazy and dask-backed (``xr.open_zarr``,
        ``xr.open_mfdataset``), a path xarray opens, or a glob of such
        paths (``"era-*.nc"``), put end to end along ``dim`` in the order
        of their names. Its chunks along ``dim`` may be irregular. Not
        modified.
    dst : path or URL
        Where to write the Zarr v3 pile store.
    dim : str
        The dimension whose positions are the rows to shuffle.
    chunk_rows : int, optional
        Rows per output chunk along ``dim`` for every variable. By default chosen
        from the piles as for :func:`daskshuffle.shuffle_zarr`: a sixteenth of a
        pile of the widest variable (between 256 KiB and 4 MiB; on object storage
        half a pile, at least 1 MiB), narrow variables in a few times as many rows.
    {options}

    Examples
    --------
    >>> import numpy as np, xarray as xr, daskshuffle
    >>> data = xr.Dataset({"x": (("sample", "feature"), np.random.rand(1000, 8))})
    >>> daskshuffle.shuffle_xarray(data, "shuffled.zarr", "sample", n_piles=8, seed=0)
    <ShuffleResult pile store '...shuffled.zarr': 1,000 rows in 8 piles ...>
    """
    checked = shuffle_options(options, dst=dst, n_piles=n_piles)
    if not isinstance(dim, str):
        raise DaskShuffleTypeError(f"Expected dim to be a dimension name. Got {dim!r} instead.", parameter="dim")
    chosen_rows = parse_positive_int(chunk_rows, "chunk_rows") if chunk_rows is not None else None
    fmt = open_xarray_source(
        ds,
        dim,
        block_nbytes=checked.block_nbytes,
        chunk_rows=chosen_rows,
        storage_options=checked.storage_options,
        block_inputs=_compute.array_inputs,
    )
    return run_shuffle(fmt, checked, variables=[variable.name for variable in fmt.variables])
