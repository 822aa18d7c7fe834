"""`daskshuffle quality`: how well a pile store's loader (or any order of ids) is shuffled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np

from ._common import cli, reported
from ._options import STORAGE_OPTIONS, json_options, positive_option

EXAMPLES_QUALITY = """\b
Examples:
  daskshuffle quality piles.zarr
  daskshuffle quality piles.zarr --png                  # draws into quality.png
  daskshuffle quality piles.zarr --batch-size 256 --png epochs.png
  daskshuffle quality my-loader-ids.npy --json
"""


def _positions(ids: np.ndarray) -> np.ndarray:
    """Ids as source positions 0..n-1: their ranks, unless they are those already."""
    ids = np.asarray(ids).reshape(-1)
    if ids.dtype.kind in "iu" and len(ids) and ids.min() == 0 and ids.max() == len(ids) - 1:
        return ids.astype(np.int64)
    return np.argsort(np.argsort(ids, kind="stable"), kind="stable").astype(np.int64)


def _check_positions(store: str, variable: str, storage_options: dict[str, Any] | None) -> None:
    """A store measured by ``variable`` must hold it: say what to do, before any pile is read, when it does not."""
    from ..pilestore import read_metadata

    metadata = read_metadata(store, storage_options)
    names = list(metadata.get("variables", [])) if metadata is not None else []
    if metadata is None or variable in names:
        return  # no pile store: the loader's own error says so
    raise click.BadParameter(
        f"Expected {store} to hold each row's source position (0, 1, 2, ... in the source's order) in the variable "
        f"{variable!r}, which quality measures the order by. Got only {names} instead. If one of them holds "
        "positions, pass --ids NAME. Otherwise give the source a position variable (a Zarr array or a Parquet "
        "column np.arange(n_rows), in the source's row order) and shuffle it again; or measure "
        "an order you have: save the positions a loader yields as a .npy file and run daskshuffle quality "
        "ORDER.npy.",
        param_hint="--ids",
    )


def _epochs_of(
    store: str, variable: str, n_epochs: int, batch_size: int, storage_options: dict[str, Any] | None
) -> tuple[list[np.ndarray], Any]:
    """The positions ``store``'s default loader yields in each epoch, and the loader (its units and groups)."""
    from .. import PileLoader

    with PileLoader(store, batch_size, variables=[variable], storage_options=storage_options) as loader:
        epochs = []
        for epoch in range(n_epochs):
            loader.set_epoch(epoch)
            epochs.append(_positions(np.concatenate([batch[variable] for batch in loader])))
        return epochs, loader


def _in_a_directory(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """``--png``: its directory must exist before anything is measured."""
    if path is not None and not Path(path).resolve().parent.is_dir():
        raise click.BadParameter(
            f"Expected a file in an existing directory. Got {path!r}, whose directory does not exist, instead.",
            ctx=ctx,
            param=param,
        )
    return path


@cli.command(epilog=EXAMPLES_QUALITY, short_help="Measure how well a loader's order is shuffled.")
@click.argument("source", metavar="STORE_OR_IDS")
@click.option(
    "--ids", "variable", default="id", show_default=True, help="The variable holding each row's source position."
)
@positive_option(
    "--epochs", "Epochs to read; the last is measured, against the one before.", default=2, show_default=True
)
@click.option("--batch-size", type=click.IntRange(min=1), default=1024, show_default=True)
@positive_option("--block-size", "Rows of a source file or chunk: counts distinct blocks per batch.")
@click.option(
    "--png",
    type=click.Path(dir_okay=False),
    is_flag=False,
    flag_value="quality.png",
    callback=_in_a_directory,
    help="Also draw the order (Hilbert curve and heat map) into this PNG file (alone: quality.png).",
)
@STORAGE_OPTIONS
@json_options("Print the measures as JSON records.")
def quality(
    source: str,
    variable: str,
    epochs: int,
    batch_size: int,
    block_size: int | None,
    png: str | None,
    storage_options: dict[str, Any] | None,
    as_json: bool,
    debug: bool,
) -> None:
    """Measure the order a pile store's PileLoader yields (by its ID variable), or an order in an .npy file.

    Each measure is printed next to what a uniform shuffle of the same size
    gives, with a verdict: "as uniform", or "not uniform" at that scale.
    """
    from .. import quality as measures

    with reported(debug):
        n_piles, loader = None, None
        if source.endswith(".npy"):
            orders = [_positions(np.load(source))]
        else:
            _check_positions(source, variable, storage_options)
            orders, loader = _epochs_of(source, variable, epochs, batch_size, storage_options)
            n_piles = loader.n_piles
        previous = orders[-2] if len(orders) > 1 else None
        table = measures.report(
            orders[-1], batch_size=batch_size, block_size=block_size, n_piles=n_piles, previous=previous, loader=loader
        )
        if png:
            names = (
                {f"epoch {index}": order for index, order in enumerate(orders)}
                if len(orders) > 1
                else {Path(source).name: orders[0]}
            )
            measures.plot_orders(names, png)
    if as_json:
        click.echo(json.dumps(table.to_dict(orient="records"), indent=2))
    else:
        click.echo(measures.summary(table, f"{source} ({len(orders[-1]):,} rows)"))
    if png:
        click.echo(f"drew the order into {png}", err=True)
