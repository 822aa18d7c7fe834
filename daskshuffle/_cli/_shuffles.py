"""The commands that shuffle into a pile store: zarr, parquet, xarray."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ._common import cli, session, split_names, summary
from ._options import STORAGE_OPTIONS, Options, cluster_options, option_group, positive_option, shuffle_option

EXAMPLES_ZARR = """\b
Examples:
  daskshuffle zarr raw.zarr piles.zarr --n-piles 512 --seed 0
  daskshuffle zarr part-*.zarr piles.zarr --variables x,y --materialize
  daskshuffle zarr s3://bucket/raw.zarr s3://bucket/piles.zarr --scheduler tcp://10.0.0.1:8786
"""


#: The shuffles' options of the commands that shuffle into a pile store, in the order they show.
_STORE_OPTIONS = ("n_piles", "seed", "materialize", "overwrite", "verify", "tmp", "pile_memory", "block_memory")


def _shuffle_options(metavar: str) -> Options:
    """The arguments and options of a command that shuffles the paths ``metavar`` names into a pile store."""
    return option_group(
        click.argument("paths", nargs=-1, required=True, metavar=metavar),
        *(shuffle_option(name) for name in _STORE_OPTIONS),
        STORAGE_OPTIONS,
        cluster_options,
    )


def _shuffle_into_store(
    shuffle: Callable[..., Any], paths: tuple[str, ...], *, quiet: bool, progress: bool | None, **options: Any
) -> None:
    """Run ``shuffle(SRC..., DST, **options)`` on the cluster the options choose, and report it."""
    if len(paths) < 2:
        raise click.UsageError("Expected at least one SRC and a DST. Got only one path instead.")
    *sources, dst = paths
    cluster = {key: options.pop(key) for key in ("scheduler", "workers", "threads_per_worker", "memory_limit")}
    with session(progress=progress, debug=options.pop("debug"), **cluster) as show:
        result = shuffle(sources, dst, progress=show, **options)
    if not quiet:
        click.echo(summary(result, dst), err=True)


@cli.command(epilog=EXAMPLES_ZARR, short_help="Shuffle the rows of Zarr arrays into a pile store.")
@click.option("--variables", multiple=True, metavar="NAMES", help="Arrays to shuffle, comma-separated.  [default: all]")
@_shuffle_options("SRC... DST")
def zarr(paths: tuple[str, ...], variables: tuple[str, ...], **options: Any) -> None:
    """Shuffle the rows of Zarr groups or arrays (SRC...) into a Zarr pile store DST.

    Arrays that share their first dimension are shuffled with one permutation.
    Read the result with daskshuffle.PileLoader, zarr or xarray.
    """
    from .. import shuffle_zarr

    _shuffle_into_store(shuffle_zarr, paths, variables=split_names(variables), **options)


EXAMPLES_PARQUET = """\b
Examples:
  daskshuffle parquet raw/ piles/ --n-piles 512 --seed 0
  daskshuffle parquet 'events/*.parquet' piles/ --columns id,x,label --materialize
  daskshuffle parquet s3://bucket/raw/ s3://bucket/piles/ --scheduler tcp://10.0.0.1:8786
"""


@cli.command(epilog=EXAMPLES_PARQUET, short_help="Shuffle the rows of Parquet files into a pile store.")
@click.option("--columns", multiple=True, metavar="NAMES", help="Columns to shuffle, comma-separated.  [default: all]")
@click.option(
    "--compression",
    type=click.Choice(["auto", "snappy", "zstd", "lz4", "gzip", "brotli", "none"]),
    default="auto",
    show_default=True,
    help="The Parquet codec of DST: auto chooses snappy or none per column, from a sample.",
)
@positive_option(
    "--row-group-size", "The most rows in a row group of DST.  [default: about 2 MiB of rows]", metavar="ROWS"
)
@positive_option(
    "--n-output-files",
    "Write DST as exactly N files of near-equal rows.  [default: a file per group of piles]",
    metavar="N",
)
@_shuffle_options("SRC... DST")
def parquet(paths: tuple[str, ...], columns: tuple[str, ...], **options: Any) -> None:
    """Shuffle the rows of Parquet files, directories or globs (SRC...) into a Parquet pile store DST.

    DST is a Parquet dataset directory (row groups within piles) that pandas,
    pyarrow and dask read. Read it for training with daskshuffle.PileLoader.
    """
    from .. import shuffle_parquet

    _shuffle_into_store(shuffle_parquet, paths, columns=split_names(columns), **options)


EXAMPLES_XARRAY = """\b
Examples:
  daskshuffle xarray era5.zarr piles.zarr --dim time --n-piles 512 --seed 0
  daskshuffle xarray 'era-*.nc' piles.zarr --dim time    # the files end to end along time, by name
  daskshuffle xarray s3://bucket/era5.zarr s3://bucket/piles.zarr --dim time --scheduler tcp://10.0.0.1:8786
"""


@cli.command(epilog=EXAMPLES_XARRAY, short_help="Shuffle an xarray dataset along a dimension into a pile store.")
@click.option("--dim", required=True, metavar="NAME", help="The dimension whose positions are the rows to shuffle.")
@positive_option("--chunk-rows", "Rows per output chunk along --dim.  [default: from the piles]", metavar="ROWS")
@_shuffle_options("SRC DST")
def xarray(paths: tuple[str, ...], dim: str, chunk_rows: int | None, **options: Any) -> None:
    """Shuffle the dataset SRC (a Zarr store, a file xarray opens, or a glob of them) along --dim into a pile store DST.

    Every variable and coordinate along --dim is shuffled with one
    permutation; the others are copied. xarray.open_zarr(DST) opens the same
    dataset up to the order along --dim; read it with daskshuffle.PileLoader.
    """
    from .. import shuffle_xarray

    if len(paths) != 2:
        raise click.UsageError(f"Expected one SRC and a DST. Got {len(paths)} paths instead.")

    def shuffle(sources: list[str], dst: str, **arguments: Any) -> Any:
        return shuffle_xarray(sources[0], dst, dim, chunk_rows=chunk_rows, **arguments)

    _shuffle_into_store(shuffle, paths, **options)
