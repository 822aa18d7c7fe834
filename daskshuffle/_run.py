"""Running a shuffle, the same for every kind of data: check the destination, plan, write, mark complete.

The public shuffles (``shuffle_zarr``, ``shuffle_parquet``, ...) open their
source as a format, parse their common arguments into
:class:`~daskshuffle._options.ShuffleOptions`, and hand both to
:func:`run_shuffle`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from . import _paths
from ._errors import DaskShuffleValueError, PileStoreExistsError
from ._graph import compute, shuffle_graph
from ._options import ShuffleOptions
from ._plan import Plan, ShuffleSettings, auto_n_piles, fingerprint, make_plan
from .formats._base import FORMAT_VERSION, Format

__all__ = ["ShuffleResult", "check_destination", "run_shuffle"]

_TMP_SUFFIX = ".daskshuffle-tmp"
#: Where a store is built before it takes the destination's place.
_NEW_SUFFIX = ".daskshuffle-new"


@dataclass(frozen=True)
class ShuffleResult:
    """What a shuffle wrote.

    Attributes
    ----------
    path : str
        The destination.
    n_rows, n_piles, seed : int
        Rows shuffled, piles and the seed (record it to reproduce the output).
    pile_sizes : ndarray
        Rows in each pile, in storage order.
    variables : list of str
        The shuffled variables or columns.
    materialized : bool
        Whether the rows were fully shuffled (``materialize=True``) or left in piles.
    seconds : float
        Wall time of the whole shuffle.
    n_tasks : int
        Tasks in the dask graph.
    """

    path: str
    n_rows: int
    n_piles: int
    seed: int
    pile_sizes: NDArray[np.int64] = field(repr=False)
    variables: list[str]
    materialized: bool
    seconds: float
    n_tasks: int

    def __repr__(self) -> str:
        sizes = self.pile_sizes
        spread = f"{int(sizes.min())}..{int(sizes.max())}" if len(sizes) else "-"
        kind = "shuffled copy" if self.materialized else "pile store"
        return (
            f"<ShuffleResult {kind} {self.path!r}: {self.n_rows:,} rows in {self.n_piles} pile{'s' if self.n_piles != 1 else ''} "
            f"(rows per pile {spread}), seed={self.seed}, variables={self.variables}, "
            f"{self.n_tasks} tasks, {self.seconds:.1f} s>"
        )


def _plan_within_budget(
    block_lengths: Sequence[int], n_piles: int | Literal["auto"], seed: int, row_nbytes: int, pile_nbytes: int
) -> Plan:
    """Plan, making sure the largest pile fits ``pile_nbytes``.

    Re-planning with more piles is unbiased: pile sizes carry no information
    about the order of the rows inside them.
    """
    n_rows = int(sum(block_lengths))
    chosen = auto_n_piles(n_rows, row_nbytes, pile_nbytes) if n_piles == "auto" else n_piles
    while True:
        plan = make_plan(block_lengths, chosen, seed)
        largest = int(plan.pile_sizes.max(initial=0)) * row_nbytes
        if largest <= pile_nbytes:
            return plan
        if n_piles != "auto":
            suggestion = auto_n_piles(n_rows, row_nbytes, pile_nbytes)
            raise DaskShuffleValueError(
                f"Expected every pile to fit pile_memory={pile_nbytes:,} bytes. Got a planned pile of {largest:,} bytes "
                f"with n_piles={n_piles} instead; use n_piles={max(suggestion, n_piles + 1)} or more, "
                "n_piles='auto', or a larger pile_memory.",
                parameter="n_piles",
            )
        chosen = max(chosen + 1, int(chosen * 1.1))


def _run_lengths(lengths: Sequence[int]) -> list[list[int]]:
    """``[[length, repeats], ...]``: block lengths are mostly equal, and a store may have many blocks."""
    runs: list[list[int]] = []
    for length in lengths:
        if runs and runs[-1][0] == int(length):
            runs[-1][1] += 1
        else:
            runs.append([int(length), 1])
    return runs


def check_destination(
    sources: Sequence[str],
    dst: str,
    tmp: str | None,
    *,
    overwrite: bool,
    storage_options: dict[str, Any] | None,
) -> str:
    """Check that ``dst`` and the scratch space may be written; return the scratch directory.

    The scratch directory is ``<dst>.daskshuffle-tmp``, or a subdirectory of ``tmp``
    named after ``dst`` when ``tmp`` is given: ``tmp`` itself is never removed.
    """
    for source in sources:
        if _paths.overlaps(dst, source):
            raise DaskShuffleValueError(
                f"Expected dst to lie outside the source. Got dst={dst!r} and source {source!r} instead; "
                "choose another destination (the source is never modified)."
            )
    _paths.check_location(dst, storage_options, "dst")
    if _paths.exists(dst, storage_options) and not overwrite:
        raise PileStoreExistsError(
            f"Expected dst not to exist. Got {dst!r}, which exists, instead; pass overwrite=True to replace it.",
            parameter="overwrite",
        )
    tmp = _paths.scratch(dst, _TMP_SUFFIX, tmp)
    for source in sources:
        if _paths.overlaps(tmp, source):
            raise DaskShuffleValueError(
                f"Expected tmp to lie outside the source. Got tmp={tmp!r} and source {source!r} instead."
            )
    _paths.check_location(tmp, storage_options, "tmp")
    return tmp


def build_path(dst: str, storage_options: dict[str, Any] | None) -> str:
    """Where a shuffle into ``dst`` builds its store: ``dst`` itself, or ``<dst>.daskshuffle-new``.

    A new destination is written in place, marked incomplete until the end
    (and removed if the run fails). A destination that exists (``overwrite=True``)
    is replaced only once the new store is complete, built beside it: until
    then the old one stays whole and readable.
    """
    return _paths.sibling(dst, _NEW_SUFFIX) if _paths.exists(dst, storage_options) else dst


def run_shuffle(fmt: Format[Any], options: ShuffleOptions, *, variables: list[str]) -> ShuffleResult:
    """Check the destination, plan, write, and mark complete: shared by every format."""
    began = time.perf_counter()
    dst, seed, materialize, storage_options = options.dst, options.seed, options.materialize, options.storage_options
    tmp = check_destination(
        fmt.describe_source(), dst, options.tmp, overwrite=options.overwrite, storage_options=storage_options
    )

    plan = _plan_within_budget(fmt.block_lengths, options.n_piles, seed, fmt.row_nbytes, options.pile_nbytes)
    fmt = fmt.for_plan(plan.n_rows / plan.n_piles, materialize=materialize)
    settings = ShuffleSettings(n_piles=plan.n_piles, seed=seed, materialize=materialize)
    metadata: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "kind": fmt.kind,
        "complete": False,
        "n_rows": plan.n_rows,
        "n_piles": plan.n_piles,
        "seed": seed,
        "materialized": materialize,
        "pile_offsets": plan.pile_offsets.tolist(),
        "variables": variables,
        "source": fmt.describe_source(),
        "settings": settings.to_dict(),
        # What the order depends on besides the settings: the blocks pass 1 read (from block_memory and the
        # source's chunks or row groups), so that two stores differ in metadata wherever they differ in order.
        "blocks": {"block_memory": options.block_nbytes, "lengths": _run_lengths(plan.block_lengths.tolist())},
    }
    metadata["fingerprint"] = fingerprint(metadata)

    merge_nbytes = max(options.block_nbytes, 1)
    fmt.group_piles(plan.pile_sizes, fmt.row_nbytes, merge_nbytes)  # a destination that cannot be cut as asked raises
    # Every check has passed: from here on the new store is written (an old one
    # at dst is left alone until the new one is complete).
    target = dst if fmt.places_itself else build_path(dst, storage_options)
    if target != dst:
        _paths.remove(target, storage_options)  # what a crashed run left
    _paths.remove(tmp, storage_options)
    graph, key = shuffle_graph(fmt, plan, tmp=tmp, dst=target, materialize=materialize, merge_nbytes=merge_nbytes)
    try:
        try:
            fmt.create_destination(target, plan.n_rows, metadata)
            fmt.prepare_pieces(tmp)
            compute(graph, key, progress=options.progress)
        finally:
            _paths.remove(tmp, storage_options)
        fmt.finalize_destination(target, {**metadata, "complete": True})
    except BaseException:
        # Nothing half-written stays behind: not this run's store, nor its pieces.
        fmt.discard_destination(target)
        if not fmt.places_itself:
            _paths.remove(target, storage_options)
        raise
    if target != dst:
        _paths.replace(target, dst, storage_options)
    return ShuffleResult(
        path=dst,
        n_rows=plan.n_rows,
        n_piles=plan.n_piles,
        seed=seed,
        pile_sizes=plan.pile_sizes,
        variables=variables,
        materialized=materialize,
        seconds=time.perf_counter() - began,
        n_tasks=len(graph),
    )
