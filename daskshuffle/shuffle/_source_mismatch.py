"""The errors of ``verify`` for sources that are not those a store was shuffled from, or that changed since."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import SourceMismatchError
from ..pilestore import GENERATIONS_KEY, sources_of
from ..plan import fingerprint
from ._store_plan import run_lengths, shown_changes

__all__ = ["changed_error", "mismatch"]


def changed_error(path: str, changed: list[str]) -> SourceMismatchError:
    """The sources of ``path`` no longer hold its rows: what ``changed`` in them since the shuffle."""
    return SourceMismatchError(
        f"Expected the sources of {path!r} to hold the rows it was shuffled from. Got other rows, from sources "
        f"changed since the shuffle instead: {shown_changes(changed)}; restore them, or shuffle them again, replacing the store "
        "(overwrite=True)."
    )


def mismatch(
    path: str,
    metadata: Mapping[str, Any],
    sources: list[str],
    *,
    given: bool,
    rows: int,
    blocks: list[int] | None,
    changed: list[str] | None = None,
) -> SourceMismatchError:
    """The sources are not those ``path`` was made from: the counts compared, and what to pass instead."""
    compared = [f"rows: the store {int(metadata['n_rows']):,}, the sources {rows:,}"]
    if GENERATIONS_KEY not in metadata and blocks is not None:
        runs = metadata["blocks"]["lengths"]
        theirs = run_lengths(blocks)
        compared.append(f"blocks: the store {sum(int(count) for _, count in runs):,}, the sources {len(blocks):,}")
        compared.append(f"fingerprint of the blocks: the store {fingerprint(runs)}, the sources {fingerprint(theirs)}")
    listed = sources_of(metadata)
    if given:
        advice = "pass the sources the store was made from" + (
            f", which it records: {', '.join(listed)} (or give none, and those are read)" if listed else ""
        )
    else:  # the sources it records: they changed since the shuffle
        advice = "they changed since the shuffle: restore them, or shuffle them again into a new store"
    if changed:
        advice = f"changed since the shuffle: {shown_changes(changed)}; restore them, or shuffle them again, replacing the store"
    return SourceMismatchError(
        f"Expected the sources {sources} to hold the rows {path!r} was made from. Got sources that differ from what "
        f"it records instead ({'; '.join(compared)}); {advice}."
    )
