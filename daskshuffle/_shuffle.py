"""The public shuffles: check everything, plan, then run the graph."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from . import _paths
from ._errors import DaskShuffleValueError, PileStoreExistsError
from ._graph import compute, shuffle_graph
from ._options import DEFAULT_BLOCK_MEMORY, DEFAULT_N_PILES, DEFAULT_PILE_MEMORY, ShuffleOptions, parse_shuffle_options
from ._parse import parse_variables
from ._plan import Plan, ShuffleSettings, auto_n_piles, fingerprint, make_plan
from .formats._base import FORMAT_VERSION, Format

if TYPE_CHECKING:  # zarr loads only when a Zarr shuffle runs: text and Parquet shuffles start faster
    from .formats._zarr import SourceLike

__all__ = ["ShuffleResult", "shuffle_zarr"]

_TMP_SUFFIX = ".daskshuffle-tmp"


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
    return tmp


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
    }
    metadata["fingerprint"] = fingerprint(metadata)

    # Every check has passed: from here on the destination is written.
    _paths.remove(dst, storage_options)
    _paths.remove(tmp, storage_options)
    graph, key = shuffle_graph(
        fmt, plan, tmp=tmp, dst=dst, materialize=materialize, merge_nbytes=max(options.block_nbytes, 1)
    )
    try:
        fmt.create_destination(dst, plan.n_rows, metadata)
        fmt.prepare_pieces(tmp)
        compute(graph, key, progress=options.progress)
    except BaseException:
        fmt.discard_destination(dst)
        raise
    finally:
        _paths.remove(tmp, storage_options)
    fmt.finalize_destination(dst, {**metadata, "complete": True})
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


def shuffle_zarr(
    src: SourceLike | Sequence[SourceLike],
    dst: str | os.PathLike[str],
    n_piles: int | Literal["auto"] = DEFAULT_N_PILES,
    *,
    seed: int | None = None,
    variables: Sequence[str] | None = None,
    overwrite: bool = False,
    materialize: bool = False,
    pile_memory: int | str = DEFAULT_PILE_MEMORY,
    block_memory: int | str = DEFAULT_BLOCK_MEMORY,
    chunk_rows: int | None = None,
    compressors: Any = "auto",
    tmp: str | os.PathLike[str] | None = None,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> ShuffleResult:
    """Shuffle the rows of Zarr arrays out of core, with the 2-pass shuffle, on dask.

    Every row goes to one of ``n_piles`` piles uniformly at random; the pieces
    of each pile are merged into one contiguous run of rows. The result is a
    Zarr v3 group with the same arrays, rows grouped by pile, ready for
    :class:`daskshuffle.PileLoader`, which shuffles each pile in memory as it
    reads it. With ``materialize=True`` each pile is shuffled before it is
    written, giving a uniformly random permutation of the rows.

    The work runs as dask graphs on the active scheduler: the current
    ``distributed.Client`` if there is one, dask's default otherwise.

    Parameters
    ----------
    src : path, URL, zarr.Group, zarr.Array, or a list of them
        The source. A group's arrays that share their first dimension are
        shuffled with one permutation, so they stay aligned. Several sources
        are concatenated along the first axis; they must hold the same arrays.
        Zarr format 2 and 3 are read. The source is opened read-only.
    dst : path or URL
        Where to write the Zarr v3 pile store. Must lie outside ``src``.
    n_piles : int or "auto", default 512
        Number of piles. ``"auto"`` picks the fewest piles that fit ``pile_memory``.
    seed : int, optional
        Same seed, same source and same parameters give the same output,
        whatever the cluster. ``None`` draws a seed and records it.
    variables : list of str, optional
        The arrays to shuffle (the others are not copied). By default every
        array, which must then share the first dimension.
    overwrite : bool, default False
        Replace ``dst`` if it exists (only once every check has passed).
    materialize : bool, default False
        Write a fully shuffled copy instead of a pile store.
    pile_memory : int or str, default "256MiB"
        The largest pile allowed, checked at planning time, before anything is written.
    block_memory : int or str, default "64MiB"
        About how much of the source one pass-1 task reads (whole chunks).
    chunk_rows : int, optional
        Rows per output chunk. By default a sixteenth of the average pile, between
        256 KiB and 4 MiB of the widest array, so that the loader reads little
        beyond each pile; 4 MiB for a materialized copy.
    compressors : optional
        The output arrays' compressors, as ``zarr.create_array`` takes them.
    tmp : path or URL, optional
        A directory for the pieces between the passes; they go to a subdirectory
        named after ``dst`` (by default ``<dst>.daskshuffle-tmp``, next to ``dst``),
        removed at the end, also after an error. ``tmp`` itself is never removed.
    progress : bool, default False
        Show a progress bar.
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    ShuffleResult

    Examples
    --------
    >>> import daskshuffle
    >>> result = daskshuffle.shuffle_zarr("raw.zarr", "shuffled.zarr", n_piles=8, seed=0)
    >>> result.n_rows, result.n_piles, result.variables
    (1000, 8, ['id', 'x', 'y'])
    """
    options = parse_shuffle_options(
        dst=dst,
        n_piles=n_piles,
        seed=seed,
        overwrite=overwrite,
        materialize=materialize,
        pile_memory=pile_memory,
        block_memory=block_memory,
        tmp=tmp,
        progress=progress,
        storage_options=storage_options,
    )
    chosen = parse_variables(variables)
    from .formats._zarr import open_zarr_sources

    fmt = open_zarr_sources(
        src,
        variables=chosen,
        block_nbytes=options.block_nbytes,
        chunk_rows=chunk_rows,
        compressors=compressors,
        storage_options=options.storage_options,
    )
    return run_shuffle(fmt, options, variables=[variable.name for variable in fmt.variables])
