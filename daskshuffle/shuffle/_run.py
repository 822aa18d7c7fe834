"""Running a shuffle, the same for every kind of data: check the destination, plan, write, mark complete.

The public shuffles open their source as a format and hand it, with their parsed
options, to :func:`run_shuffle`.
"""

from __future__ import annotations

import errno
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._errors import (
    Argument,
    IncompletePileStoreError,
    IneffectiveSettingWarning,
    ShuffleInterrupted,
    StorageFullError,
)
from .._parse import format_size
from ..formats import CollectionSource, Format
from ..pilestore import RUN_KEY, new_run, read_metadata
from ..plan import DEFAULT_N_PILES, LevelPlan, Plan
from ..storage import Location, Manifest as _Manifest, _leftovers, _own, _paths, crash_point, exclusive
from ._compute import compute
from ._destination import build_path, check_destination, local_pieces, remove_if_empty, shuffle_locations
from ._graph import level_tmp, shuffle_graph
from ._options import ShuffleOptions
from ._resume import (
    Done,
    Earlier,
    Refuse,
    Resume,
    ResumeOptions,
    Seen,
    check_sources_unchanged,
    counted_earlier,
    decide,
    earlier_seed,
)
from ._store_plan import changed_while_read, plan_within_budget, store_metadata

__all__ = ["ShuffleResult", "earlier_record", "refuse_changed_listing", "run_shuffle"]

#: The manifest of finished tasks, inside the scratch directory.
_MANIFEST = "_done"
#: The manifest's mark that the store and the pieces' directories were created.
_CREATED = "created"


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
            f"(rows per pile {spread}), seed={self.seed}"
            + (f", variables={self.variables}" if self.variables else "")
            + f", {self.n_tasks} tasks, {self.seconds:.1f} s>"
        )


def _read_store(dst: Location, target: Location, tmp: Location, *, look: bool, resumable: bool, store: bool) -> Seen:
    """What is at ``dst`` (and, ``resumable``, where this run would build its store), read once the lock is held.

    ``look``: read the record of an earlier run at all (not with ``overwrite``, nor for a source without an
    identity to compare). ``store``: ``dst`` is a pile store (a text output is a file, replaced as ``shuf -o`` does).
    """
    dst_exists = dst.exists()
    foreign = store and dst_exists and _foreign(dst)
    earlier = earlier_record(dst, target, resumable=resumable) if look and not foreign else None
    if earlier is None:
        return Seen(dst_exists, foreign=foreign)
    path = dst if earlier.at_dst else target
    # Continued in: nothing placed there since may redirect a write, or the manifest read.
    for location, what in ((tmp, "a shuffle's scratch directory"), (path, "a store being written")):
        if location.is_local and location.exists():
            _own.refuse_below(location.path, what)
    created = _CREATED in _Manifest(tmp.join(_MANIFEST)).done()
    return Seen(dst_exists, replace(earlier, created=created))


def _foreign(dst: Location) -> bool:
    """Whether what is at ``dst`` is neither a pile store (complete or not) nor an empty directory."""
    try:
        if read_metadata(dst) is not None:
            return False
    except IncompletePileStoreError:  # a pile store's metadata, as another version wrote it
        return False
    return not dst.isdir() or bool(dst.names())


def earlier_record(dst: Location, target: Location, *, resumable: bool) -> Earlier | None:
    """The record of an earlier run at ``dst`` (or, ``resumable``, at ``target``) and where it is; the lock held."""
    for path in dict.fromkeys((dst, target) if resumable else (dst,)):
        if path.exists():
            metadata = read_metadata(path)
            if metadata is not None and "fingerprint" in metadata:
                return Earlier(path.url, metadata, at_dst=path == dst)
    return None


def refuse_changed_listing(
    kind: str, sources: list[Any], identity: list[dict[str, Any]], variables: list[str] | None, options: ShuffleOptions
) -> None:
    """Refuse a rerun whose sources, as their listing gives them (``sources`` and their ``identity``, before any byte
    of them is read: a Parquet dataset's footers), changed since the store at ``dst`` was written.

    ``variables``: those the call names (``None``: every one, known once opened: not compared here). Nothing is
    compared with ``overwrite``. The lock is let go at once: the run takes it again once the source is open, and
    compares again.
    """
    dst, tmp = shuffle_locations(options)
    if options.overwrite or not dst.exists():
        return  # nothing earlier: a run builds beside dst only when dst exists (build_path)
    check_destination(sources, dst, tmp, overwrite=True, workers=False, storage_options=options.storage_options)
    with exclusive(dst):
        earlier = earlier_record(dst, build_path(dst, dst.exists()), resumable=True)
        if earlier is not None:
            check_sources_unchanged(earlier, kind, sources, identity, variables)


@dataclass(frozen=True)
class _Run:
    """One run of a shuffle as :func:`run_shuffle` settled it, before it takes the lock of ``dst``."""

    options: ShuffleOptions
    dst: Location
    #: The scratch directory: ``<dst>.daskshuffle-tmp``, or below the ``tmp`` given or chosen.
    tmp: Location
    #: The ``tmp`` given, or the directory of this machine's pieces chosen: what a killed run left there goes too.
    pieces: Location | None
    #: A source on storage: each task is marked in a manifest, and an interrupted run is continued.
    resumable: bool
    #: The source has an identity (files, or a dask token): its complete store is recognised, resumable or not.
    recognised: bool
    began: float


def run_shuffle(fmt: Format[Any], options: ShuffleOptions, *, variables: list[str]) -> ShuffleResult:
    """Check the destination, plan, write, and mark complete: shared by every format.

    A pile store of a source on storage is resumable: each task records that it
    finished in a manifest, and the same call continues an interrupted run; a
    completed shuffle returns at once. Any other failure removes what the run
    built. ``variables``: those of ``fmt``.
    """
    began = time.perf_counter()
    dst, given_tmp = shuffle_locations(options)
    resumable = not fmt.moves_into_place and bool(fmt.source_names)
    recognised = resumable or bool(fmt.identity)
    chosen_tmp = given_tmp or local_pieces(dst, sum(fmt.block_lengths) * fmt.row_nbytes)
    try:
        tmp = check_destination(
            fmt.source_locations or fmt.source_names,
            dst,
            chosen_tmp,
            # An existing dst is decided on below, once it is planned.
            overwrite=options.overwrite or recognised,
            storage_options=options.storage_options,
            directory=not fmt.moves_into_place,
        )
        # What is at dst decides what this run does: it is looked at once no other run can change it.
        with exclusive(dst):
            result = _run_locked(_Run(options, dst, tmp, chosen_tmp, resumable, recognised, began), fmt, variables)
    finally:
        if chosen_tmp is not None and given_tmp is None:
            remove_if_empty(chosen_tmp)  # the directory of this destination's pieces on this machine
    if options.verify and result.n_tasks:
        from ._verify import verify_location

        # Files, which the store names; else in memory, a dask collection (an xarray dataset of files too) or
        # objects a user opened: read as the shuffle read them.
        files = fmt.source_names and fmt.source_locations is None and not isinstance(fmt, CollectionSource)
        verify_location(
            dst,
            [] if files else fmt,
            storage_options=options.storage_options,
            block_nbytes=options.block_nbytes,
            progress=options.progress,
        )
    return result


def _run_locked(run: _Run, fmt: Format[Any], variables: list[str]) -> ShuffleResult:
    """Plan, decide (:func:`~daskshuffle.shuffle._resume.decide`) and carry it out, the lock of dst held."""
    options, dst, tmp, resumable = run.options, run.dst, run.tmp, run.resumable
    materialize = options.materialize
    # Once the lock is held: what was checked before may have changed.
    target = dst if fmt.moves_into_place else build_path(dst, dst.exists())
    store = _read_store(
        dst,
        target,
        tmp,
        look=run.recognised and not options.overwrite,
        resumable=resumable,
        store=not fmt.moves_into_place,
    )
    choices = ResumeOptions(overwrite=options.overwrite, resumable=resumable, seed_given=options.seed_given)
    seed = earlier_seed(store, choices, options.seed)
    earlier = counted_earlier(store, choices)
    if earlier is not None:  # before planning: the layout's sample reads the sources
        check_sources_unchanged(earlier, fmt.kind, fmt.source_names, fmt.identity, variables)
    plan = plan_within_budget(
        fmt.block_lengths,
        options.n_piles,
        seed,
        fmt.row_nbytes,
        options.pile_nbytes,
        levels=options.levels,
        block_nbytes=options.block_nbytes,
        storage="local" if tmp.is_local else "object",
    )
    fmt = fmt.for_plan(
        plan.n_rows / plan.n_piles, materialize=materialize, storage="local" if dst.is_local else "object"
    )
    # A number chosen for this data, not the default (which the docs say suits data of any size).
    if isinstance(options.n_piles, int) and options.n_piles != DEFAULT_N_PILES and options.n_piles > plan.n_rows:
        warnings.warn(
            f"n_piles={options.n_piles} is more piles than the {plan.n_rows:,} rows: most piles hold no row, and each "
            "costs a merge's reads and its entry in the store's metadata without shuffling anything more; pass "
            f"n_piles='auto' (or at most {max(plan.n_rows, 1):,}).",
            IneffectiveSettingWarning,
            stacklevel=4,
        )
    metadata = store_metadata(fmt, options, plan, variables)
    decision = decide(store, metadata, choices, dst.url)
    if isinstance(decision, Refuse):
        raise decision.error
    n_tasks = 0
    if isinstance(decision, Done):  # what a run killed after completing the store left goes
        _leftovers.clean(dst, run.pieces)
    else:
        # The run's identity: a store continued keeps its run's, any other run draws its own (outside the fingerprint).
        metadata[RUN_KEY] = decision.run or new_run()
        resume = Location.of(decision.url, options.storage_options) if isinstance(decision, Resume) else None
        n_tasks = _write(run, fmt, plan, metadata, target=target, resume=resume)
    return ShuffleResult(
        path=dst.url,
        n_rows=plan.n_rows,
        n_piles=plan.n_piles,
        seed=seed,
        pile_sizes=plan.pile_sizes,
        variables=variables,
        materialized=materialize,
        seconds=time.perf_counter() - run.began,
        n_tasks=n_tasks,
    )


def _write(
    run: _Run,
    fmt: Format[Any],
    plan: Plan | LevelPlan,
    metadata: dict[str, Any],
    *,
    target: Location,
    resume: Location | None,
) -> int:
    """Write the store at ``target`` (continuing the one at ``resume``, if given) and put it at ``dst``; the tasks run."""
    options, dst, tmp, resumable = run.options, run.dst, run.tmp, run.resumable
    manifest = _Manifest(tmp.join(_MANIFEST)) if resumable else None
    done = manifest.done() if manifest is not None and resume is not None else frozenset()
    target = resume if resume is not None else target
    # A destination that cannot be cut as asked raises here, before anything is written.
    graph, key = shuffle_graph(
        fmt, plan, tmp=tmp, dst=target, merge_nbytes=max(options.block_nbytes, 1), manifest=manifest, done=done
    )
    # Every check has passed: from here on the new store is written (an old one at dst stays until it is complete).
    if resume is None:  # nothing earlier, or a run killed before its store was whole: start over
        if target != dst:
            target.remove()  # what a crashed run of another shuffle left
        tmp.remove()
    try:
        if resume is not None:
            fmt.resume_destination(target)
        else:
            fmt.create_destination(target, plan.n_rows, metadata)
            levels = range(1, plan.n_levels + 1) if isinstance(plan, LevelPlan) else ()
            for pieces in [level_tmp(tmp, level) for level in levels] or [tmp]:
                fmt.prepare_pieces(pieces)
            if manifest is not None:
                manifest.mark(_CREATED)
        compute(graph, key, progress=options.progress, remote=not (target.is_local and tmp.is_local))
        crash_point("shuffle written")
        changed = changed_while_read(dst.url, metadata, fmt.identify_source_again())
        if changed is not None:
            raise changed
        fmt.finalize_destination(target, {**metadata, "complete": True})
    except KeyboardInterrupt as interrupt:
        if not resumable:
            _discard(fmt, target, tmp)
        # What is done stays beside dst: the same call continues it. What the interrupt did to the cluster follows.
        raise _interrupted(dst, [target, tmp] if resumable else [], str(interrupt)) from None
    except OSError as error:
        _discard(fmt, target, tmp)
        if error.errno == errno.ENOSPC:
            raise StorageFullError(
                (
                    f"Expected room for the shuffle's pieces and store. Got a full disk ({error}) instead; the pieces "
                    "and the partial store are removed. Free space, or pass ",
                    Argument("tmp"),
                    " on a larger disk (the pieces take about the size of the data, as does the store).",
                )
            ) from error
        raise
    except BaseException:
        _discard(fmt, target, tmp)
        raise
    crash_point("shuffle complete")
    tmp.remove()
    if target != dst:
        _paths.replace(target, dst)
    return len(graph)


def _interrupted(dst: Location, kept: list[Location], cluster: str = "") -> ShuffleInterrupted:
    """What an interrupted shuffle left, and how to go on; ``cluster``, what the interrupt did to the workers."""
    left = [path for path in kept if path.exists()]
    after = f" {cluster}" if cluster else ""
    if not left:
        return ShuffleInterrupted(
            f"Interrupted the shuffle into {dst.url!r}; what it wrote is removed: run it again to start over.{after}"
        )
    size = format_size(sum(path.nbytes() for path in left))
    return ShuffleInterrupted(
        f"Interrupted the shuffle into {dst.url!r}; it left {size} in {' and '.join(repr(path.url) for path in left)}: "
        f"run it again the same way to continue it, or remove them.{after}"
    )


def _discard(fmt: Format[Any], target: Location, tmp: Location) -> None:
    """Nothing half-written stays behind: not this run's store, nor its pieces."""
    tmp.remove()
    fmt.discard_destination(target)
    if not fmt.moves_into_place:
        target.remove()
