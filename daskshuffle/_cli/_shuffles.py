"""The commands that shuffle into a pile store: zarr, parquet, xarray."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..plan._options import (
    DEFAULT_BLOCK_MEMORY,
    DEFAULT_N_PILES,
    DEFAULT_PARQUET_COMPRESSION,
    DEFAULT_PILE_MEMORY,
    PARQUET_COMPRESSIONS,
)
from ._common import (
    SEED,
    NPiles,
    Size,
    cli,
    cluster_options,
    progress_on_stderr,
    session,
    show_progress,
    split_names,
    summary,
)

EXAMPLES_ZARR = """\b
Examples:
  daskshuffle zarr raw.zarr piles.zarr --n-piles 512 --seed 0
  daskshuffle zarr part-*.zarr piles.zarr --variables x,y --materialize
  daskshuffle zarr s3://bucket/raw.zarr s3://bucket/piles.zarr --scheduler tcp://10.0.0.1:8786
"""


def _store_shuffle_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the commands that shuffle into a pile store (zarr, parquet)."""
    return _shuffle_options(command, verify=True, metavar="SRC... DST")


def _shuffle_options(command: Callable[..., Any], *, verify: bool, metavar: str) -> Callable[..., Any]:
    """The options of a command that shuffles into a pile store; ``--verify`` where its shuffle has it."""
    options = [
        click.argument("paths", nargs=-1, required=True, metavar=metavar),
        click.option(
            "--n-piles",
            type=NPiles(),
            default=str(DEFAULT_N_PILES),
            show_default=True,
            help="Piles; auto fits --pile-memory.",
        ),
        click.option(
            "--seed", type=SEED, help="Same source and seed give the same output.  [default: drawn and reported]"
        ),
        click.option("--materialize", is_flag=True, help="Write a fully shuffled copy instead of a pile store."),
        click.option("--overwrite", is_flag=True, help="Replace DST if it exists."),
        click.option("--tmp", metavar="DIR", help="Where pieces go.  [default: next to DST]"),
        click.option(
            "--pile-memory",
            default=DEFAULT_PILE_MEMORY,
            show_default=True,
            type=Size(),
            metavar="SIZE",
            help="The largest pile allowed.",
        ),
        click.option(
            "--block-memory",
            default=DEFAULT_BLOCK_MEMORY,
            show_default=True,
            type=Size(),
            metavar="SIZE",
            help="Source one task reads.",
        ),
    ]
    if verify:
        options.insert(
            5,
            click.option(
                "--verify", is_flag=True, help="Then prove DST holds exactly the rows of SRC (daskshuffle verify)."
            ),
        )
    command = cluster_options(command)
    for option in reversed(options):
        command = option(command)
    return command


def _shuffle_into_store(shuffle: Callable[..., Any], paths: tuple[str, ...], **options: Any) -> None:
    """Run ``shuffle(SRC..., DST, **options)`` on the cluster the options choose, and report it."""
    if len(paths) < 2:
        raise click.UsageError("Expected at least one SRC and a DST. Got only one path instead.")
    *sources, dst = paths
    cluster = {key: options.pop(key) for key in ("scheduler", "workers", "threads_per_worker", "memory_limit")}
    quiet, progress = options.pop("quiet"), options.pop("progress")
    with session(debug=options.pop("debug"), **cluster), progress_on_stderr():
        result = shuffle(sources, dst, progress=show_progress(progress), **options)
    if not quiet:
        click.echo(summary(result, dst), err=True)


def _dataset_shuffle_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of ``daskshuffle xarray``: one dataset, then DST."""
    return _shuffle_options(command, verify=True, metavar="SRC DST")


@cli.command(epilog=EXAMPLES_ZARR, short_help="Shuffle the rows of Zarr arrays into a pile store.")
@click.option("--variables", multiple=True, metavar="NAMES", help="Arrays to shuffle, comma-separated.  [default: all]")
@_store_shuffle_options
def zarr(paths: tuple[str, ...], variables: tuple[str, ...], **options: Any) -> None:
    """Shuffle the rows of Zarr groups or arrays (SRC...) into a Zarr pile store DST.

    Arrays that share their first dimension are shuffled with one permutation.
    Read the result with daskshuffle.PileLoader, zarr or xarray.
    """
    from ..shuffle._shuffle import shuffle_zarr

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
    type=click.Choice(PARQUET_COMPRESSIONS),
    default=DEFAULT_PARQUET_COMPRESSION,
    show_default=True,
    help="The Parquet codec of DST: auto chooses snappy or none per column, from a sample.",
)
@click.option(
    "--row-group-size",
    type=click.IntRange(min=1),
    metavar="ROWS",
    help="The most rows in a row group of DST.  [default: a row group per pile]",
)
@click.option(
    "--n-output-files",
    type=click.IntRange(min=1),
    metavar="N",
    help="Write DST as exactly N files of near-equal rows.  [default: a file per group of piles]",
)
@_store_shuffle_options
def parquet(paths: tuple[str, ...], columns: tuple[str, ...], **options: Any) -> None:
    """Shuffle the rows of Parquet files, directories or globs (SRC...) into a Parquet pile store DST.

    DST is a Parquet dataset directory (a row group per pile) that pandas,
    pyarrow and dask read. Read it for training with daskshuffle.PileLoader.
    """
    from ..shuffle._frames import shuffle_parquet

    _shuffle_into_store(shuffle_parquet, paths, columns=split_names(columns), **options)


EXAMPLES_XARRAY = """\b
Examples:
  daskshuffle xarray era5.zarr piles.zarr --dim time --n-piles 512 --seed 0
  daskshuffle xarray s3://bucket/era5.zarr s3://bucket/piles.zarr --dim time --scheduler tcp://10.0.0.1:8786
"""


@cli.command(epilog=EXAMPLES_XARRAY, short_help="Shuffle an xarray dataset along a dimension into a pile store.")
@click.option("--dim", required=True, metavar="NAME", help="The dimension whose positions are the rows to shuffle.")
@click.option(
    "--chunk-rows",
    type=click.IntRange(min=1),
    metavar="ROWS",
    help="Rows per output chunk along --dim.  [default: from the piles]",
)
@_dataset_shuffle_options
def xarray(paths: tuple[str, ...], dim: str, chunk_rows: int | None, **options: Any) -> None:
    """Shuffle the dataset SRC (a Zarr store or a file xarray opens) along --dim into a Zarr pile store DST.

    Every variable and coordinate along --dim is shuffled with one
    permutation; the others are copied. xarray.open_zarr(DST) opens the same
    dataset up to the order along --dim; read it with daskshuffle.PileLoader.
    """
    from ..shuffle._xarray import shuffle_xarray

    if len(paths) != 2:
        raise click.UsageError(f"Expected one SRC and a DST. Got {len(paths)} paths instead.")

    def shuffle(sources: list[str], dst: str, **arguments: Any) -> Any:
        return shuffle_xarray(sources[0], dst, dim, chunk_rows=chunk_rows, **arguments)

    _shuffle_into_store(shuffle, paths, **options)
