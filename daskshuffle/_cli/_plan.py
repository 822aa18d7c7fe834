"""`daskshuffle plan`: what a shuffle of a given size would do, computed without reading data."""

from __future__ import annotations

import json
from typing import Any, Literal

import click

from .._parse import parse_nbytes
from ..plan import DEFAULT_MIN_READ, DEFAULT_N_PILES
from ._common import cli, reported
from ._options import Count, json_options, positive_option, shuffle_option, size_option

EXAMPLES_PLAN = """\b
Examples:
  daskshuffle plan --rows 1e8 --row-bytes 1KiB
  daskshuffle plan --rows 1e10 --row-bytes 256 --n-piles auto --block-memory 1GiB --workers 200
  daskshuffle plan --rows 1e9 --row-bytes 1KiB --n-piles auto --json | jq .n_reads
"""


@cli.command(
    "plan", epilog=EXAMPLES_PLAN, short_help="Show what a shuffle of a given size would do, without reading data."
)
@click.option("--rows", required=True, type=Count(), help="Rows of the source (1e9 and 1_000_000 work).")
@size_option("--row-bytes", "Bytes of one row, all variables together (1KiB).", required=True)
@shuffle_option(
    "n_piles", f"Number of piles, or 'auto', as a shuffle takes it.  [default: {DEFAULT_N_PILES}]", {"n_piles": None}
)
@shuffle_option("block_memory")
@shuffle_option("pile_memory")
@size_option("--min-read", "The smallest read worth a request.", DEFAULT_MIN_READ)
@positive_option("--workers", "Tasks running at once (threads).", default=1, show_default=True)
@click.option(
    "--levels",
    type=click.Choice(["auto", "1", "2", "3", "4"]),
    default="auto",
    show_default=True,
    help="Levels of scatter before the merge, as a shuffle takes them.",
)
@click.option(
    "--storage",
    type=click.Choice(["object", "local"]),
    default="object",
    show_default=True,
    help="Where the pieces go: it sets where 'auto' adds levels.",
)
@json_options("Print the figures as JSON.")
def plan(
    rows: int,
    row_bytes: str,
    n_piles: int | Literal["auto"] | None,
    levels: str,
    storage: Literal["object", "local"],
    as_json: bool,
    debug: bool,
    **sizes: Any,
) -> None:
    """Blocks, piles, tasks, pieces and reads with their size, bytes moved, the plan's memory, the
    largest pile and its chance of overflowing, and whether reads fall below --min-read (the knee),
    with what to change if they do. Nothing is read and no cluster is started.
    """
    from .. import explain

    with reported(debug):
        model = explain(
            rows,
            parse_nbytes(row_bytes, "row_bytes"),
            n_piles=n_piles,
            levels="auto" if levels == "auto" else int(levels),
            storage=storage,
            **sizes,
        )
    click.echo(json.dumps(model.to_dict(), indent=2) if as_json else str(model))
