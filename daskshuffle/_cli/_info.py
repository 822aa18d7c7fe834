"""`daskshuffle info`: what a pile store holds."""

from __future__ import annotations

import json
from typing import Any

import click
import numpy as np

from .._errors import UnfinishedShuffleError
from ._common import cli, one_line

EXAMPLES_INFO = """\b
Examples:
  daskshuffle info piles.zarr
  daskshuffle info piles.zarr --json | jq .seed
"""


@cli.command(epilog=EXAMPLES_INFO, short_help="Show what a pile store holds, and whether it is complete.")
@click.argument("store")
@click.option("--json", "as_json", is_flag=True, help="Print the store's metadata as JSON.")
@click.option(
    "--offsets", is_flag=True, help="With --json: every pile's first row.  [default: rows per pile summarised]"
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def info(store: str, as_json: bool, offsets: bool, debug: bool) -> None:
    """What a pile store holds: rows, piles and their sizes, seed, variables, complete or not.

    Exits with status 1 if the store is incomplete (its shuffle did not finish).
    """
    from ..formats import open_pile_reader

    try:
        reader = open_pile_reader(store)
    except UnfinishedShuffleError as error:
        if debug:
            raise
        click.echo(json.dumps({"path": store, "complete": False}) if as_json else f"{store}\n  complete: no")
        raise click.ClickException(one_line(error)) from None
    except Exception as error:
        if debug:
            raise
        raise click.ClickException(one_line(error)) from None
    metadata = dict(reader.metadata)
    if not offsets:  # one line per pile is 500 lines for 512 piles: the sizes' spread says what matters
        sizes = np.diff(reader.pile_offsets)
        metadata.pop("pile_offsets", None)
        spread = (
            {"min": int(sizes.min()), "median": int(np.median(sizes)), "max": int(sizes.max())} if len(sizes) else {}
        )
        metadata["rows_per_pile"] = spread
        if "generations" in metadata:  # each records its own offsets (and the first its whole metadata)
            metadata["generations"] = [
                {key: entry[key] for key in ("generation", "path", "n_rows", "seed")}
                for entry in metadata["generations"]
            ]
    if as_json:
        click.echo(json.dumps({"path": store, **metadata}, indent=2, default=str))
        return
    click.echo(_describe(store, metadata, reader.pile_offsets))


def _describe(store: str, metadata: dict[str, Any], pile_offsets: Any) -> str:
    sizes = np.diff(pile_offsets)
    spread = (
        f"min {int(sizes.min()):,}, median {int(np.median(sizes)):,}, max {int(sizes.max()):,}" if len(sizes) else "-"
    )
    sources = metadata.get("source") or []
    rows = [
        ("kind", metadata.get("kind")),
        ("complete", "yes"),
        ("rows", f"{int(metadata['n_rows']):,}"),
        ("piles", f"{int(metadata['n_piles']):,} (rows per pile: {spread})"),
        ("seed", metadata.get("seed")),
        ("materialized", "yes" if metadata.get("materialized") else "no (piles are shuffled on read)"),
        ("variables", ", ".join(metadata.get("variables") or []) or "-"),
        ("source", sources[0] + (f" and {len(sources) - 1} more" if len(sources) > 1 else "") if sources else "-"),
        ("format version", metadata.get("format_version")),
    ]
    if "generations" in metadata:
        live = metadata["generations"]
        listed = ", ".join(f"{entry['generation']}: {int(entry['n_rows']):,} rows" for entry in live)
        rows.insert(3, ("generations", f"{len(live)}, oldest first ({listed})"))
    return "\n".join([store, *(f"  {name}: {value}" for name, value in rows)])
