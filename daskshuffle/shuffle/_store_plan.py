"""What a shuffle plans and what its store records: the plan within the pile budget, and the metadata.

The metadata names everything the store's order depends on, so that two stores
differ in fingerprint wherever they differ in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import groupby
from typing import Any, Literal

import numpy as np

from .._errors import Argument, CorruptPileStoreError, SourceChangedError
from ..formats import Format
from ..pilestore import FORMAT_VERSION, metadata_disagrees
from ..plan import (
    Layout,
    LevelPlan,
    Plan,
    ShuffleSettings,
    choose_layout,
    fingerprint,
    make_level_plan,
    make_plan,
)
from ..storage import changed_entries
from ._options import ShuffleOptions

__all__ = [
    "changed_while_read",
    "differences",
    "missing_identity",
    "plan_within_budget",
    "run_lengths",
    "shown_changes",
    "source_changed_error",
    "store_metadata",
]


def plan_within_budget(
    lengths: Sequence[int],
    n_piles: int | Literal["auto"],
    seed: int,
    row_nbytes: int,
    pile_nbytes: int,
    *,
    levels: int | Literal["auto"] = 1,
    block_nbytes: int = 1,
    storage: Literal["local", "object"] = "local",
) -> Plan | LevelPlan:
    """Plan, in one level or more, as :func:`daskshuffle.explain` predicts, making sure the largest pile fits
    ``pile_nbytes`` (a drawn pile too large is the rare case that differs from the prediction)."""
    layout = choose_layout(
        int(np.sum(lengths)),
        row_nbytes,
        len(lengths),
        n_piles=n_piles,
        pile_nbytes=pile_nbytes,
        block_nbytes=block_nbytes,
        levels=levels,
        storage=storage,
    )
    while True:
        plan = _draw(lengths, layout, seed)
        largest = int(plan.pile_sizes.max(initial=0)) * row_nbytes
        if largest <= pile_nbytes:
            return plan
        layout = layout.after_overflow(largest)


def _draw(lengths: Sequence[int], layout: Layout, seed: int) -> Plan | LevelPlan:
    if layout.fanouts:
        return make_level_plan(lengths, layout.n_piles, layout.fanouts, seed, layout.block_rows)
    return make_plan(lengths, layout.n_piles, seed)


def run_lengths(lengths: Sequence[int]) -> list[list[int]]:
    """``[[length, repeats], ...]``: block lengths are mostly equal, and a store may have many blocks."""
    return [[length, sum(1 for _ in repeats)] for length, repeats in groupby(int(length) for length in lengths)]


def store_metadata(
    fmt: Format[Any], options: ShuffleOptions, plan: Plan | LevelPlan, variables: list[str]
) -> dict[str, Any]:
    """What the store records, its fingerprint included: everything its order depends on."""
    settings = ShuffleSettings(n_piles=plan.n_piles, seed=plan.seed, materialize=options.materialize)
    metadata: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "kind": fmt.kind,
        "complete": False,
        "n_rows": plan.n_rows,
        "n_piles": plan.n_piles,
        "seed": plan.seed,
        "materialized": options.materialize,
        "pile_offsets": plan.pile_offsets.tolist(),
        "variables": variables,
        "source": fmt.source_names,
        # What the sources were (sizes and versions of their files, dask tokens): a rerun compares them.
        "source_identity": fmt.identity,
        "settings": settings.to_dict(),
        # What the order depends on besides the settings: the blocks pass 1 read.
        "blocks": {"block_memory": options.block_nbytes, "lengths": run_lengths(plan.block_lengths.tolist())},
    }
    if isinstance(plan, LevelPlan):  # the super-piles the rows went through before their piles
        metadata["levels"] = {"n_levels": plan.n_levels, "fanouts": plan.fanouts, "n_super_piles": plan.n_super}
    metadata["fingerprint"] = fingerprint(metadata)
    return metadata


def missing_identity(recorded: Mapping[str, Any], where: str) -> CorruptPileStoreError | None:
    """The error for ``recorded`` metadata (of the store at ``where``) that records no sources' identity, else ``None``.

    Every store this version writes records it: one without it was edited or damaged.

    Examples
    --------
    >>> missing_identity({"source_identity": []}, "piles.zarr") is None
    True
    >>> missing_identity({}, "piles.zarr")
    CorruptPileStoreError("Expected the metadata of the pile store 'piles.zarr' to agree with itself ...")
    """
    if isinstance(recorded.get("source_identity"), list):
        return None
    return metadata_disagrees(
        where,
        "the identity of its sources, source_identity, a list",
        f"{recorded.get('source_identity')!r}",
    )


def shown_changes(changes: Sequence[str]) -> str:
    """The first five ``changes``, and how many more."""
    return "; ".join(changes[:5]) + (f"; and {len(changes) - 5} more" if len(changes) > 5 else "")


def source_changed_error(
    where: str, recorded: Mapping[str, Any], identity: list[dict[str, Any]], *, complete: bool
) -> SourceChangedError | None:
    """The error of a rerun whose sources, of ``identity`` now, changed since the store at ``where`` recorded
    ``recorded`` (with its ``source_identity``: :func:`missing_identity` checks it); ``None`` if none changed.

    ``complete``: the store is the finished one at ``dst`` (else an interrupted run's).
    """
    changes = changed_entries(recorded["source_identity"], identity)
    if not changes:
        return None
    what = "return it as it is" if complete else "continue its interrupted shuffle"
    return SourceChangedError(
        (
            f"Expected the sources the pile store {where!r} was written from, unchanged, to {what}. Got sources "
            f"changed since instead: {shown_changes(changes)}. Pass ",
            Argument("overwrite", True),
            " to shuffle them again.",
        ),
        parameter="overwrite",
    )


def changed_while_read(
    where: str, recorded: Mapping[str, Any], identity: list[dict[str, Any]]
) -> SourceChangedError | None:
    """The error of a shuffle into ``where`` whose sources, of ``identity`` once every block was read, are not
    those its metadata ``recorded`` when it began; ``None`` if they are."""
    changes = changed_entries(recorded["source_identity"], identity)
    if not changes:
        return None
    return SourceChangedError(
        f"Expected the sources of the pile store {where!r} to stay unchanged while the shuffle read them. Got "
        f"changes instead: {shown_changes(changes)}. The store is removed (its rows would mix two states of the "
        "sources): shuffle them again once they no longer change."
    )


def differences(recorded: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """The keys its order depends on whose values differ between the ``recorded`` metadata and ``ours``."""
    keys = ("kind", "source", "variables", "n_rows", "settings", "blocks", "format_version")
    return [key for key in keys if recorded.get(key) != ours.get(key)]
