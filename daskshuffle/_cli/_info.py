"""`daskshuffle info`: what a pile store holds."""

from __future__ import annotations

import json
from typing import Any

import click
import numpy as np

from .._errors import DaskShuffleError, UnfinishedShuffleError
from .._parse import format_size
from ..reshuffle import clean_generations, generation_leftovers
from ..storage import Leftover, Location, _leftovers
from ._common import cli, one_line, reported
from ._options import STORAGE_OPTIONS, json_options, shuffle_option

EXAMPLES_INFO = """\b
Examples:
  daskshuffle info piles.zarr
  daskshuffle info piles.zarr --json | jq .seed
  daskshuffle info piles.zarr --clean
"""


@cli.command(epilog=EXAMPLES_INFO, short_help="Show what a pile store holds, and whether it is complete.")
@click.argument("store")
@click.option(
    "--offsets", is_flag=True, help="With --json: every pile's first row.  [default: rows per pile summarised]"
)
@click.option(
    "--clean",
    is_flag=True,
    help="Remove what a run killed after completing the store left beside it (its pieces, its lock).",
)
@shuffle_option("tmp", "The tmp= the runs were given: their pieces are looked for there too.")
@STORAGE_OPTIONS
@json_options("Print the store's metadata as JSON.")
def info(
    store: str,
    offsets: bool,
    clean: bool,
    tmp: str | None,
    storage_options: dict[str, Any] | None,
    as_json: bool,
    debug: bool,
) -> None:
    """What a pile store holds: rows, piles and their sizes, seed, variables, complete or not.

    Also what runs left beside it (pieces, a lock), and in it (generations that
    a killed append, evict or compact left unlisted), with their size. Exits
    with status 1 if the store is incomplete (its shuffle did not finish).
    """
    from ..readers import open_pile_reader
    from ..shuffle import sources_changed

    with reported(debug):
        where = Location.of(store, storage_options)
        scratch = Location.of(tmp, storage_options) if tmp is not None else None
        try:
            reader = open_pile_reader(store, storage_options=storage_options)
        except UnfinishedShuffleError:
            left = _leftovers.find(where, scratch)
            if as_json:
                click.echo(json.dumps({"path": store, "complete": False, "leftovers": _as_json(left)}))
            else:
                click.echo(f"{store}\n  complete: no" + _left_line(left, "run the same shuffle again to continue it"))
            raise
        metadata = dict(reader.metadata)
        grows = metadata.get("kind") in ("zarr", "xarray")  # a Zarr pile store may hold generations
        if clean:
            removed = _leftovers.remove(where, scratch)
            if grows:
                removed += clean_generations(where, scratch)
    if clean:
        nbytes = sum(leftover.nbytes for leftover in removed)
        click.echo(
            f"daskshuffle: removed {len(removed)} leftover(s) beside {store}, {format_size(nbytes)}",
            err=True,
        )
    left = _leftovers.find(where, scratch)
    if grows:
        left += generation_leftovers(where, scratch)
    sizes = np.diff(reader.pile_offsets)
    spread = {"min": int(sizes.min()), "median": int(np.median(sizes)), "max": int(sizes.max())} if len(sizes) else {}
    if not offsets:  # one line per pile is 500 lines for 512 piles: the sizes' spread says what matters
        metadata.pop("pile_offsets", None)
        metadata["rows_per_pile"] = spread
        if "generations" in metadata:  # each records its own offsets (and the first its whole metadata)
            metadata["generations"] = [
                {key: entry[key] for key in ("generation", "path", "n_rows", "seed")}
                for entry in metadata["generations"]
            ]
    try:  # the sources' files looked at, no row read; sources gone, storage that did not answer: said
        changed: list[str] | str | None = sources_changed(reader.metadata, storage_options)
    except (DaskShuffleError, OSError, ValueError) as error:
        changed = f"not compared: {one_line(error)}"
    if as_json:
        found = {"path": store, **metadata, "sources_changed": changed, "leftovers": _as_json(left)}
        click.echo(json.dumps(found, indent=2, default=str))
        return
    click.echo(
        _describe(store, metadata, spread)
        + _sources_line(changed)
        + _left_line(left, f"run the same step again, or `daskshuffle info --clean {store}`, to remove them")
    )


def _sources_line(changed: list[str] | str | None) -> str:
    if changed is None:
        return (
            "\n  sources since the shuffle: not known (generations, a source in memory or opened by xarray, or a Zarr "
            "source of more chunks than are listed)"
        )
    if isinstance(changed, str):
        return f"\n  sources since the shuffle: {changed}"
    if not changed:
        return "\n  sources since the shuffle: unchanged (their files' names, sizes and versions)"
    from ..shuffle import shown_changes

    return (
        f"\n  sources since the shuffle: CHANGED ({shown_changes(changed)}); the store holds the rows they had: "
        "shuffle them again, replacing it (overwrite=True)"
    )


def _as_json(left: list[Leftover]) -> list[dict[str, Any]]:
    return [{"path": leftover.path, "nbytes": leftover.nbytes, "what": leftover.what} for leftover in left]


def _left_line(left: list[Leftover], advice: str) -> str:
    """``  left beside it: 62.1 MB (pieces in ...; ...); <advice>``, or nothing."""
    if not left:
        return ""
    nbytes = format_size(sum(leftover.nbytes for leftover in left))
    described = "; ".join(f"{leftover.what}: {leftover.path}" for leftover in left)
    return f"\n  left beside it: {nbytes} ({described}); {advice}"


def _describe(store: str, metadata: dict[str, Any], sizes: dict[str, int]) -> str:
    spread = ", ".join(f"{name} {size:,}" for name, size in sizes.items()) or "-"
    sources = metadata.get("source") or []
    rows = [
        ("kind", metadata.get("kind")),
        ("complete", "yes"),
        ("rows", f"{int(metadata['n_rows']):,}"),
        ("piles", f"{int(metadata['n_piles']):,} (rows per pile: {spread})"),
        ("seed", metadata.get("seed")),
        ("materialized", "yes" if metadata.get("materialized") else "no"),
        ("variables", ", ".join(metadata.get("variables") or []) or "-"),
        ("source", sources[0] + (f" and {len(sources) - 1} more" if len(sources) > 1 else "") if sources else "-"),
        ("format version", metadata.get("format_version")),
        # Whether every chunk (Zarr) or part file (Parquet) read is checked to be its run's, at its place.
        (
            "bound to its run",
            "each generation to its own run" if "generations" in metadata else f"yes (run {metadata.get('run')})",
        ),
    ]
    if "generations" in metadata:
        live = metadata["generations"]
        listed = ", ".join(f"{entry['generation']}: {int(entry['n_rows']):,} rows" for entry in live)
        rows.insert(3, ("generations", f"{len(live)}, oldest first ({listed})"))
    return "\n".join([store, *(f"  {name}: {value}" for name, value in rows)])
