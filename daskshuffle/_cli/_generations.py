"""`daskshuffle append`, `evict` and `compact`: a pile store that grows with new data and keeps a window of it."""

from __future__ import annotations

from typing import Any

import click

from ._common import cli, session
from ._options import DEBUG, QUIET, STORAGE_OPTIONS, cluster_options, positive_option, shuffle_option

EXAMPLES = """\b
Examples:
  daskshuffle append piles.zarr day-2.zarr
  daskshuffle evict piles.zarr --keep-last 7
  daskshuffle compact piles.zarr --workers 4
"""


def _report(store: str, live: list[Any], quiet: bool) -> None:
    """Say on standard error what ``store`` holds now, its ``live`` generations, unless ``quiet``."""
    if quiet:
        return
    rows = sum(generation.n_rows for generation in live)
    listed = ", ".join(f"{generation.generation}: {generation.n_rows:,}" for generation in live)
    noun = f"generation{'s' * (len(live) != 1)}"
    click.echo(f"daskshuffle: {store} holds {rows:,} rows in {len(live)} {noun} ({listed})", err=True)


@cli.command(epilog=EXAMPLES, short_help="Shuffle new rows into the piles of a Zarr pile store.")
@click.argument("store")
@click.argument("sources", nargs=-1, required=True, metavar="SRC...")
@shuffle_option("seed", "The new generation's seed.  [default: drawn]")
@shuffle_option("block_memory")
@shuffle_option("verify", "Prove the new generation holds exactly the rows of SRC.")
@STORAGE_OPTIONS
@cluster_options
def append(
    store: str,
    sources: tuple[str, ...],
    seed: int | None,
    block_memory: str,
    verify: bool,
    storage_options: dict[str, Any] | None,
    quiet: bool,
    **cluster: Any,
) -> None:
    """Shuffle the rows of SRC into STORE's piles as a new generation.

    Readers opened before see the old rows, readers opened after see all of
    them; nothing is removed. Run it again the same way after an interruption.
    """
    from .. import append as append_rows

    with session(**cluster) as progress:
        live = append_rows(
            store,
            list(sources),
            seed=seed,
            block_memory=block_memory,
            verify=verify,
            storage_options=storage_options,
            progress=progress,
        )
    _report(store, live, quiet)


@cli.command(epilog=EXAMPLES, short_help="Remove the oldest generations of a Zarr pile store.")
@click.argument("store")
@positive_option("--keep-last", "Generations to keep, the newest.", required=True)
@STORAGE_OPTIONS
@QUIET
@DEBUG
def evict(store: str, keep_last: int, storage_options: dict[str, Any] | None, quiet: bool, debug: bool) -> None:
    """Keep the newest KEEP_LAST generations of STORE: a shuffled moving window of the data."""
    from .. import evict as evict_generations

    with session(scheduler="sync", debug=debug):
        live = evict_generations(store, keep_last=keep_last, storage_options=storage_options)
    _report(store, live, quiet)


@cli.command(epilog=EXAMPLES, short_help="Rewrite the generations of a Zarr pile store as one.")
@click.argument("store")
@STORAGE_OPTIONS
@cluster_options
def compact(store: str, storage_options: dict[str, Any] | None, quiet: bool, **cluster: Any) -> None:
    """Copy STORE's generations into one, in the same order: each pile contiguous again, the batches unchanged."""
    from .. import compact as compact_generations

    with session(**cluster) as progress:
        live = compact_generations(store, storage_options=storage_options, progress=progress)
    _report(store, live, quiet)
