"""``shuffle_zarr``: the public shuffle of Zarr arrays, a thin layer over :func:`daskshuffle.shuffle._run.run_shuffle`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import parse_positive_int, parse_variables
from . import _collections
from ._options import parse_shuffle_options, shared_docs
from ._run import ShuffleResult, run_shuffle

if TYPE_CHECKING:  # zarr loads only when a Zarr shuffle runs: text and Parquet shuffles start faster
    from ..sources import SourceLike, XarrayFormat, ZarrFormat

__all__ = ["shuffle_zarr"]


def _dask_arrays(src: object) -> dict[str, Any] | None:
    """``{name: dask array}`` if ``src`` is a dask array or a dict of them, else ``None`` (paths and zarr objects)."""
    if _collections.is_dask_array(src):
        from ..sources import ARRAY_NAME

        return {ARRAY_NAME: src}
    if not isinstance(src, Mapping):
        return None
    others = {str(name): type(value).__name__ for name, value in src.items() if not _collections.is_dask_array(value)}
    if others or not all(isinstance(name, str) for name in src):
        raise DaskShuffleTypeError(
            "Expected src, a dict, to map names (str) to dask arrays. Got "
            f"{others or sorted(map(repr, src))} instead; wrap other arrays with dask.array.from_array.",
            parameter="src",
        )
    return dict(src)


@shared_docs
def shuffle_zarr(
    src: SourceLike | Sequence[SourceLike] | Mapping[str, Any] | Any,
    dst: str | os.PathLike[str],
    n_piles: int | Literal["auto"] = 512,
    *,
    variables: Sequence[str] | None = None,
    chunk_rows: int | None = None,
    compressors: Any = "auto",
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
    """Shuffle the rows of Zarr arrays out of core, with the 2-pass shuffle, on dask.

    Every row goes to one of ``n_piles`` piles uniformly at random, and each pile
    is written as one contiguous run: a Zarr v3 group with the same arrays, ready
    for :class:`daskshuffle.PileLoader`, which shuffles each pile in memory as it
    reads it. With ``materialize=True`` each pile is shuffled too, giving a
    uniformly random permutation. The work runs on the active dask scheduler.

    Parameters
    ----------
    src : path, URL, zarr.Group, zarr.Array, or a list of them; or a dask array, or a dict of dask arrays
        The source, opened read-only. A group's arrays that share their first
        dimension are shuffled with one permutation, so they stay aligned; several
        sources are concatenated along the first axis. Zarr formats 2 and 3 are
        read. A group or array you opened is read through a read-only copy of its
        store, each request within the deadline of its own storage options. A
        dask array (stored as ``"data"``) or a dict ``{name: dask array}`` of
        arrays with the same number of rows and known chunks is computed once,
        and stored as xarray writes a dataset, with rows along ``"row"``.
    dst : path or URL
        Where to write the Zarr v3 pile store. Must lie outside ``src``.
    variables : list of str, optional
        The arrays to shuffle (the others are not copied). By default every
        array, which must then share the first dimension.
    chunk_rows : int, optional
        Rows per output chunk. By default a sixteenth of the average pile (between
        256 KiB and 4 MiB of the widest array); on object storage half a pile;
        4 MiB for a materialized copy.
    compressors : optional
        The output arrays' compressors, as ``zarr.create_array`` takes them.
    {n_piles, seed, overwrite, materialize, pile_memory, block_memory, tmp, progress, storage_options, verify, levels}

    Returns
    -------
    ShuffleResult
        What was written: its path, rows, pile sizes and seed (the one drawn, with ``seed=None``).

    Examples
    --------
    >>> import daskshuffle
    >>> result = daskshuffle.shuffle_zarr("raw.zarr", "shuffled.zarr", n_piles=8, seed=0)
    >>> result.n_rows, result.n_piles, result.variables
    (1000, 8, ['id', 'x', 'y'])
    """
    checked = parse_shuffle_options(locals())
    chosen = parse_variables(variables)
    chunk_rows = parse_positive_int(chunk_rows, "chunk_rows") if chunk_rows is not None else None
    arrays = _dask_arrays(src)
    if arrays is not None:
        if not (isinstance(compressors, str) and compressors == "auto"):
            raise DaskShuffleValueError(
                f"Expected compressors='auto' with dask arrays. Got {compressors!r} instead; their pile store is "
                "written as xarray writes a dataset, with the codecs daskshuffle chooses.",
                parameter="compressors",
            )
        from ..sources import open_arrays_source

        fmt: XarrayFormat | ZarrFormat = open_arrays_source(
            arrays,
            variables=chosen,
            block_nbytes=checked.block_nbytes,
            chunk_rows=chunk_rows,
            block_inputs=_collections.array_inputs,
        )
    else:
        from ..sources import open_zarr_sources

        fmt = open_zarr_sources(
            cast("SourceLike | Sequence[SourceLike]", src),
            variables=chosen,
            block_nbytes=checked.block_nbytes,
            chunk_rows=chunk_rows,
            compressors=compressors,
            storage_options=checked.storage_options,
        )
    return run_shuffle(fmt, checked, variables=[variable.name for variable in fmt.variables])
