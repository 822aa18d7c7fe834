"""`daskshuffle append`, `evict` and `compact`: a pile store that grows with new data and keeps a window of it."""

from __future__ import annotations

from typing import Any

import click

from ._common import SEED, Size, cli, cluster_options, progress_on_stderr, session, show_progress

EXAMPLES = """\b
Examples:
  daskshuffle append piles.zarr day-2.zarr
  daskshuffle evict piles.zarr --keep-last 7
  daskshuffle compact piles.zarr --workers 4
"""


def _describe(store: str, live: list[Any]) -> str:
    rows = sum(generation.n_rows for generation in live)
    listed = ", ".join(f"{generation.generation}: {generation.n_rows:,}" for generation in live)
    return f"daskshuffle: {store} holds {rows:,} rows in {len(live)} generation{'s' * (len(live) != 1)} ({listed})"


@cli.command(epilog=EXAMPLES, short_help="Shuffle new rows into the piles of a Zarr pile store.")
@click.argument("store")
@click.argument("sources", nargs=-1, required=True, metavar="SRC...")
@click.option("--seed", type=SEED, help="The new generation's seed.  [default: drawn]")
@click.option(
    "--block-memory",
    default="64MiB",
    show_default=True,
    type=Size(),
    metavar="SIZE",
    help="About how much one task reads.",
)
@click.option("--verify", is_flag=True, help="Prove the new generation holds exactly the rows of SRC.")
@cluster_options
def append(
    store: str, sources: tuple[str, ...], seed: int | None, block_memory: str, verify: bool, **options: Any
) -> None:
    """Shuffle the rows of SRC into STORE's piles as a new generation.

    Readers opened before see the old rows, readers opened after see all of
    them; nothing is removed. Run it again the same way after an interruption.
    """
    from .. import append as append_rows

    quiet = options.pop("quiet")
    progress = show_progress(options.pop("progress"))
    with session(debug=options.pop("debug"), **options), progress_on_stderr():
        live = append_rows(store, list(sources), seed=seed, block_memory=block_memory, verify=verify, progress=progress)
    if not quiet:
        click.echo(_describe(store, live), err=True)


@cli.command(epilog=EXAMPLES, short_help="Remove the oldest generations of a Zarr pile store.")
@click.argument("store")
@click.option("--keep-last", type=click.IntRange(min=1), required=True, help="Generations to keep, the newest.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print the summary line on stderr.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def evict(store: str, keep_last: int, quiet: bool, debug: bool) -> None:
    """Keep the newest KEEP_LAST generations of STORE: a shuffled moving window of the data."""
    from .. import evict as evict_generations

    with session(scheduler="sync", workers=None, threads_per_worker=None, memory_limit=None, debug=debug):
        live = evict_generations(store, keep_last=keep_last)
    if not quiet:
        click.echo(_describe(store, live), err=True)


@cli.command(epilog=EXAMPLES, short_help="Rewrite the generations of a Zarr pile store as one.")
@click.argument("store")
@cluster_options
def compact(store: str, **options: Any) -> None:
    """Copy STORE's generations into one, in the same order: each pile contiguous again, the batches unchanged."""
    from .. import compact as compact_generations

    quiet = options.pop("quiet")
    progress = show_progress(options.pop("progress"))
    with session(debug=options.pop("debug"), **options), progress_on_stderr():
        live = compact_generations(store, progress=progress)
    if not quiet:
        click.echo(_describe(store, live), err=True)
