"""The public table shuffles: Parquet datasets, dask and pandas DataFrames."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

from dask.base import tokenize

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import parse_positive_int, parse_variables
from ..pilestore import ParquetWriting
from ..sources import COMPRESSIONS, list_parquet_sources, open_dataframe_source, open_parquet_sources
from ..storage import Location, _leftovers, identify_token
from . import _collections
from ._destination import check_destination, shuffle_locations
from ._options import parse_shuffle_options, shared_docs
from ._run import ShuffleResult, earlier_record, refuse_changed_listing, run_shuffle

__all__ = ["shuffle_dataframe", "shuffle_parquet"]

PathLike = str | os.PathLike[str]


def parse_writing(compression: object, row_group_size: object, n_output_files: object) -> ParquetWriting:
    """How the Parquet pile store is written, checked."""
    if not isinstance(compression, str) or compression.lower() not in COMPRESSIONS:
        raise DaskShuffleValueError(
            f"Expected compression to be one of {list(COMPRESSIONS)}. Got {compression!r} instead.",
            parameter="compression",
        )
    return ParquetWriting(
        compression=compression.lower(),
        row_group_size=parse_positive_int(row_group_size, "row_group_size") if row_group_size is not None else None,
        n_output_files=parse_positive_int(n_output_files, "n_output_files") if n_output_files is not None else None,
    )


@shared_docs
def shuffle_parquet(
    src: PathLike | Sequence[PathLike],
    dst: PathLike,
    n_piles: int | Literal["auto"] = 512,
    *,
    columns: Sequence[str] | None = None,
    compression: str = "auto",
    row_group_size: int | None = None,
    n_output_files: int | None = None,
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
    """Shuffle the rows of a Parquet dataset out of core, with the 2-pass shuffle, on dask.

    Every row goes to one of ``n_piles`` piles uniformly at random, and each pile
    is written as one contiguous run: a Parquet dataset directory (a row group per
    pile, the shuffle's metadata in ``_daskshuffle.json``) that pandas, pyarrow and
    dask read, ready for :class:`daskshuffle.PileLoader`. With ``materialize=True``
    each pile is shuffled too: a uniformly random permutation of the rows. Every
    Arrow type and the schema's metadata (pandas' index and dtypes) are kept.

    Parameters
    ----------
    src : path, URL or glob, or a list of them
        Parquet files, directories (hive partitions become columns) or globs;
        read-only. Schemas Arrow cannot unify are an error naming the files and
        columns, raised before anything is written.
    dst : path or URL
        The destination directory. Must lie outside ``src``.
    columns : list of str, optional
        The columns to shuffle (the others are not copied). By default all.
    compression : str, default "auto"
        The destination's Parquet codec: "auto" (snappy for the columns a sample
        shows it shrinks, none for the others), or "snappy", "zstd", "lz4", "gzip",
        "brotli" or "none" for every column.
    row_group_size : int, optional
        The most rows in one row group of the destination (row groups also end
        at every pile's end). By default about 2 MiB of rows.
    n_output_files : int, optional
        Write the destination as exactly this many files of near-equal rows (whole
        piles each, so at most ``n_piles``). By default one file per group of piles
        of about ``block_memory``; on object storage, of about 16 MiB.
    {n_piles, seed, overwrite, materialize, pile_memory, block_memory}
        Runs of whole row groups are read (a row group larger than this is one block).
    {tmp, progress, storage_options, verify, levels}

    Returns
    -------
    ShuffleResult
        What was written: its path, rows, pile sizes and seed (the one drawn, with ``seed=None``).

    Examples
    --------
    >>> import daskshuffle
    >>> daskshuffle.shuffle_parquet("raw.parquet", "shuffled.parquet", n_piles=8, seed=0)
    <ShuffleResult pile store '...shuffled.parquet': 1,000 rows in 8 piles ...>
    """
    checked = parse_shuffle_options(locals())
    chosen = parse_variables(columns, "columns")
    writing = parse_writing(compression, row_group_size, n_output_files)
    listing = list_parquet_sources(src, checked.storage_options)
    # Its footers are read once a rerun compared the listing with what the store records.
    refuse_changed_listing(listing.kind, listing.sources, listing.identity, chosen, checked)
    fmt = open_parquet_sources(listing, columns=chosen, block_nbytes=checked.block_nbytes, writing=writing)
    return run_shuffle(fmt, checked, variables=fmt.variables)


@shared_docs
def shuffle_dataframe(
    df: Any,
    dst: PathLike,
    n_piles: int | Literal["auto"] = 512,
    *,
    index: bool | None = None,
    compression: str = "auto",
    row_group_size: int | None = None,
    n_output_files: int | None = None,
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
    """Shuffle the rows of a dask or pandas DataFrame into a Parquet pile store.

    The same as :func:`shuffle_parquet`, for a DataFrame. A dask DataFrame is
    computed once: each partition (a block) is counted and written to a spool
    directory (``<dst>.daskshuffle-spool``, or in ``tmp``), removed at the end.
    A pandas DataFrame is cut into blocks of about ``block_memory``. Columns keep
    their types as ``pyarrow.Table.from_pandas`` converts them.

    Parameters
    ----------
    df : dask.dataframe.DataFrame or pandas.DataFrame
        The rows to shuffle; not modified.
    dst : path or URL
        The destination Parquet dataset directory.
    index : bool, optional
        ``True`` keeps the index as a column, ``False`` drops it. By default a
        named or non-range index is kept and a default ``RangeIndex`` dropped.
    compression, row_group_size, n_output_files
        As for :func:`shuffle_parquet`.
    {n_piles, seed, overwrite, materialize, pile_memory, block_memory}
        A pandas DataFrame is cut into blocks of this size; each partition of a dask DataFrame is
        a block.
    {tmp, progress, storage_options, verify}
        The DataFrame is read again for the check (a dask DataFrame from its spool).
    {levels}

    Returns
    -------
    ShuffleResult
        What was written: its path, rows, pile sizes and seed (the one drawn, with ``seed=None``).

    Examples
    --------
    >>> import pandas as pd, daskshuffle
    >>> df = pd.DataFrame({"id": range(1000), "label": ["a", "b"] * 500})
    >>> daskshuffle.shuffle_dataframe(df, "shuffled.parquet", n_piles=8, seed=0)
    <ShuffleResult pile store '...shuffled.parquet': 1,000 rows in 8 piles ...>
    """
    import pandas as pd

    if not _collections.is_dask_dataframe(df) and not isinstance(df, pd.DataFrame):
        raise DaskShuffleTypeError(
            f"Expected df to be a dask or pandas DataFrame. Got {type(df).__name__} instead; "
            "for Parquet files use shuffle_parquet."
        )
    if index is not None and not isinstance(index, bool):
        raise DaskShuffleTypeError(f"Expected index to be None, True or False. Got {index!r} instead.")
    checked = parse_shuffle_options(locals())
    writing = parse_writing(compression, row_group_size, n_output_files)
    token = str(tokenize(df))  # a source's identity where it has no files to look at
    if not _collections.is_dask_dataframe(df):  # run again, it returns the store it wrote, as every shuffle does
        fmt = open_dataframe_source(df, index=index, block_nbytes=checked.block_nbytes, writing=writing, token=token)
        return run_shuffle(fmt, checked, variables=fmt.variables)
    # Describing a dask DataFrame computes it: an existing destination is refused first, unless it is its store.
    dst_location, tmp_location = shuffle_locations(checked)
    check_destination([], dst_location, tmp_location, overwrite=checked.overwrite or _holds(dst_location, token))
    # Public API that dask does not list in an __all__; loaded for a dask DataFrame only.
    from dask.dataframe.utils import make_meta  # type: ignore[attr-defined]

    spool = dst_location.scratch(_leftovers.SPOOL_SUFFIX, tmp_location)
    spool.remove()
    try:
        spool.makedirs()
        fmt = open_dataframe_source(
            df,
            index=index,
            block_nbytes=checked.block_nbytes,
            writing=writing,
            spool=spool,
            describe_partitions=_collections.describe_partitions,
            meta=make_meta(df),  # the empty frame the partitions are like, known without computing any
            token=token,
        )
        return run_shuffle(fmt, checked, variables=fmt.variables)
    finally:
        spool.remove()


def _holds(dst: Location, token: str) -> bool:
    """Whether ``dst`` is the complete pile store of the DataFrame whose dask token is ``token``."""
    earlier = earlier_record(dst, dst, resumable=False)
    identity = [identify_token("DataFrame", token)]
    return earlier is not None and earlier.complete and earlier.metadata.get("source_identity") == identity
