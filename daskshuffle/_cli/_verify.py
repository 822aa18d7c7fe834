"""`daskshuffle verify`: prove that a pile store holds exactly the rows of its source."""

from __future__ import annotations

from typing import Any

import click

from ._common import cli, session
from ._options import STORAGE_OPTIONS, cluster_options, shuffle_option

EXAMPLES_VERIFY = """\b
Examples:
  daskshuffle verify piles.zarr
  daskshuffle verify piles.zarr raw-0.zarr raw-1.zarr --workers 4
  daskshuffle verify s3://bucket/piles.parquet s3://bucket/raw/ --scheduler tcp://host:8786
"""


@cli.command(epilog=EXAMPLES_VERIFY, short_help="Prove that a pile store holds exactly the rows of its source.")
@click.argument("store")
@click.argument("sources", nargs=-1, metavar="[SRC]...")
@shuffle_option("block_memory")
@STORAGE_OPTIONS
@cluster_options
def verify(
    store: str,
    sources: tuple[str, ...],
    block_memory: str,
    storage_options: dict[str, Any] | None,
    quiet: bool,
    **cluster: Any,
) -> None:
    """Compare an order-independent checksum of every variable of STORE with its sources'.

    The sources are those the store recorded unless SRC are given. Exits with
    status 1, naming the variable, if a row was changed, lost or added, and
    naming the file if a chunk of the store is damaged.
    """
    from .. import verify as verify_store

    with session(**cluster) as progress:
        result = verify_store(
            store, *sources, storage_options=storage_options, block_memory=block_memory, progress=progress
        )
    click.echo(f"{result.store}: the same {result.n_rows:,} rows as {', '.join(result.sources)}")
    if not quiet:
        for name, value in result.checksums.items():
            click.echo(f"  {name}: {value}")
