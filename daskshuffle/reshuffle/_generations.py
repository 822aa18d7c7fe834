"""Pile stores that grow with incoming data: :func:`append`, :func:`evict` and :func:`compact` generations.

Readers opened at any moment see the store before or after a change, never part of one.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import DaskShuffleValueError, StorageFullError
from .._parse import parse_bool, parse_nbytes, parse_path, parse_positive_int
from ..pilestore import generations as store_io, group_metadata
from ..readers import GenerationsReader, ZarrPileReader
from ..shuffle import map_tasks, shared_docs
from ..sources import open_zarr_sources
from ..storage import Leftover, Location, _lock as _store_lock, crash_point, exclusive

__all__ = ["Generation", "append", "clean_generations", "compact", "evict", "generation_leftovers", "generations"]


def _copy_rows(store: Location, number: int, start: int, stop: int) -> None:
    """Rows ``start:stop`` of the store as its root lists them now, written into generation ``number``."""
    with GenerationsReader(store) as reader:
        rows = reader.read_rows(start, stop)
    store_io.write_rows(store_io.generation_location(store, store_io.generation_path(number)), start, rows)


#: Rows ``compact`` copies per task: about this many bytes.
DEFAULT_COPY_MEMORY = "64MiB"


@dataclass(frozen=True)
class Generation:
    """One generation of a pile store: a first shuffle, an append, or a compaction of earlier ones.

    Attributes
    ----------
    generation : int
        Its number; numbers only grow.
    path : str
        Where its arrays are, relative to the store ("" for the first shuffle).
    n_rows : int
        Rows it holds.
    seed : int
        The seed of the shuffle that made it.
    """

    generation: int
    path: str
    n_rows: int
    seed: int


def _records(metadata: dict[str, Any]) -> list[Generation]:
    return [
        Generation(int(entry["generation"]), entry["path"], int(entry["n_rows"]), int(entry["seed"]))
        for entry in metadata[store_io.GENERATIONS_KEY]
    ]


def generations(store: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> list[Generation]:
    """The live generations of a Zarr pile store, oldest first.

    Examples
    --------
    >>> import daskshuffle
    >>> daskshuffle.generations("piles.zarr")
    [Generation(generation=0, path='', n_rows=1000, seed=0)]
    """
    return _records(store_io.read_root(Location.of(parse_path(store, "store"), storage_options)))


def _check_variables(
    store: Location, root: dict[str, Any], src: Any, storage_options: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Refuse a source whose arrays differ from the store's (names, dtypes, row shapes), before anything is written.

    ``storage_options`` reach the source. Returns the source's identity.
    """
    ours = store_io.array_types(store, root)
    blocks = parse_nbytes(DEFAULT_COPY_MEMORY, "copy_memory")  # the source's blocks are not read here: any size
    fmt = open_zarr_sources(src, variables=list(ours), block_nbytes=blocks, storage_options=storage_options)
    theirs = {variable.name: (str(variable.dtype), tuple(variable.row_shape)) for variable in fmt.variables}
    different = {name: (ours[name], theirs.get(name)) for name in ours if theirs.get(name) != ours[name]}
    if different:
        described = "; ".join(f"{name}: store {a[0]} rows of {a[1]}, source {b}" for name, (a, b) in different.items())
        raise DaskShuffleValueError(
            f"Expected a source with the store's arrays (same names, dtypes and row shapes). Got differences "
            f"instead ({described}); convert the new data to the store's types first.",
            parameter="src",
        )
    return fmt.identity


def _found(store: Location, root: dict[str, Any], tmp: Location | None) -> list[Leftover]:
    found = store_io.leftovers(store, root, tmp)
    if not store_io.consolidated(store, root):
        found.append(Leftover.at(store.join("zarr.json"), "consolidated metadata listing other generations"))
    return found


def generation_leftovers(store: Location, tmp: Location | None = None) -> list[Leftover]:
    """What killed appends, evictions and compactions left in ``store`` (nothing while one of them runs)."""
    if _store_lock.held(store):
        return []
    return _found(store, store_io.read_root(store), tmp)


def _repair(store: Location, root: dict[str, Any], tmp: Location | None = None, keep: str = "") -> None:
    """Remove what a killed step left, but generation ``keep``'s (an append continues it), and consolidate the
    root again. The store's lock is held."""
    for left in store_io.leftovers(store, root, tmp):
        if not keep or left.location.name.split(".", 1)[0] != keep.rsplit("/", 1)[-1]:
            left.location.remove()
    if not store_io.consolidated(store, root):
        store_io.consolidate(store)


def clean_generations(store: Location, tmp: Location | None = None) -> list[Leftover]:
    """Remove what :func:`generation_leftovers` finds, holding the store's lock; returns what it found."""
    with exclusive(store):
        root = store_io.read_root(store)
        found = _found(store, root, tmp)
        _repair(store, root, tmp)
    return found


def _holds(store: Location, entry: dict[str, Any], identity: list[dict[str, Any]]) -> bool:
    """Whether the generation ``entry`` of ``store`` holds the rows of a source of ``identity``; one that records
    no identity is refused as damaged."""
    recorded = store_io.sources_of(entry, "source_identity", store.url)
    return all(found in recorded for found in identity)


def _continues(target: Location, identity: list[dict[str, Any]], seed: int | None) -> bool:
    """Whether the generation at ``target``, left unlisted by a killed append, is this append's to continue."""
    metadata = group_metadata(target)
    return (
        metadata is not None
        and metadata.get("source_identity") == identity
        and (seed is None or metadata.get("seed") == seed)
    )


@shared_docs
def append(
    store: str | os.PathLike[str],
    src: Any,
    *,
    seed: int | None = None,
    chunk_rows: int | None = None,
    compressors: Any = "auto",
    pile_memory: int | str = "256MiB",
    block_memory: int | str = "64MiB",
    tmp: str | os.PathLike[str] | None = None,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    verify: bool = False,
    levels: int | Literal["auto"] = "auto",
) -> list[Generation]:
    """Shuffle the rows of ``src`` into the piles of ``store``, as a new generation.

    Each new row goes to one of the store's piles uniformly at random (a 2-pass
    shuffle of ``src`` alone, with its own seed, into ``generations/<n>``), then
    the root lists the new generation in one write: a reader sees the old rows or
    every row. Pile ``p`` is pile ``p`` of each generation, oldest first. An append
    of a source the store already lists does nothing; an interrupted one is
    finished by calling ``append`` again the same way. :func:`evict` keeps the newest.

    Parameters
    ----------
    store : path or URL
        A complete Zarr pile store (of ``shuffle_zarr``, not materialized).
    src : path, URL, zarr.Group, or a list of them
        The new rows, with the store's arrays (names, dtypes, row shapes).
    seed : int, optional
        The new generation's seed (drawn if ``None``).
    chunk_rows, compressors
        As for :func:`~daskshuffle.shuffle_zarr` (the new generation's chunks).
    {pile_memory, block_memory, tmp, progress, storage_options, verify, levels}

    Returns
    -------
    list of Generation
        The live generations, the new one last.

    Examples
    --------
    >>> import daskshuffle
    >>> [g.n_rows for g in daskshuffle.append("piles.zarr", "day-2.zarr", seed=1)]  # the next day's rows
    [1000, 1000]
    """
    from ..shuffle import shuffle_zarr

    location = Location.of(parse_path(store, "store"), storage_options)
    root = store_io.read_root(location)
    if root.get("materialized"):
        raise DaskShuffleValueError(
            f"Expected a pile store. Got a materialized shuffled copy at {location.url!r} instead, whose order new rows "
            "cannot join; shuffle the old and new sources together.",
            parameter="store",
        )
    identity = _check_variables(location, root, src, storage_options)
    scratch = Location.of(parse_path(tmp, "tmp"), storage_options) if tmp else None
    with exclusive(location):
        root = store_io.read_root(location)
        live = root[store_io.GENERATIONS_KEY]
        if identity and any(_holds(location, entry, identity) for entry in live):
            _repair(location, root, scratch)  # appended already (a run killed after listing it included): rows once
            return _records(root)
        number = max(int(entry["generation"]) for entry in live) + 1
        path = store_io.generation_path(number)
        target = location.join(path)
        _repair(location, root, scratch, keep=path if _continues(target, identity, seed) else "")
        store_io.ensure_group(location)
        shuffle_zarr(
            src,
            target.url,
            int(root["n_piles"]),
            seed=seed,
            variables=list(root["variables"]),
            chunk_rows=chunk_rows,
            compressors=compressors,
            pile_memory=pile_memory,
            block_memory=block_memory,
            tmp=tmp,
            progress=progress,
            storage_options=storage_options,
            verify=verify,
            levels=levels,
        )
        crash_point("append shuffled")
        # Its entry, read from its own store.
        with ZarrPileReader(store_io.generation_location(location, path)) as reader:
            entry = store_io.entry_of(number, reader.metadata, reader.store)
        grown = store_io.write_root(location, root, [*live, entry])
    return _records(grown)


def evict(
    store: str | os.PathLike[str], *, keep_last: int, storage_options: dict[str, Any] | None = None
) -> list[Generation]:
    """Remove all but the newest ``keep_last`` generations from every pile: a moving window of the data.

    The root metadata is rewritten first (in one write), then the old
    generations' files are removed: a loader opened before should be opened
    again. Also removes what an interrupted ``append``, ``evict`` or ``compact`` left.

    Examples
    --------
    >>> import daskshuffle
    >>> [g.generation for g in daskshuffle.generations("window.zarr")]  # raw.zarr, then day-2.zarr appended
    [0, 1]
    >>> [g.generation for g in daskshuffle.evict("window.zarr", keep_last=1)]
    [1]
    """
    location = Location.of(parse_path(store, "store"), storage_options)
    keep_last = parse_positive_int(keep_last, "keep_last")
    with exclusive(location):
        root = store_io.read_root(location)
        _repair(location, root)
        entries = root[store_io.GENERATIONS_KEY]
        gone, kept = entries[:-keep_last], entries[-keep_last:]
        if gone:
            kept_root = store_io.write_root(location, root, kept)
            crash_point("evict listed")
            for entry in gone:
                store_io.remove_generation(location, entry, root["variables"])
            crash_point("evict removed")
            store_io.consolidate(location)  # without the removed arrays
            root = kept_root
    return _records(root)


def compact(
    store: str | os.PathLike[str],
    *,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    copy_memory: int | str = DEFAULT_COPY_MEMORY,
) -> list[Generation]:
    """Rewrite the live generations of ``store`` as one, in the same order: piles contiguous again.

    A store that many appends made reads each pile from as many places. Every
    row is copied once (tasks of about ``copy_memory`` on the active dask
    scheduler), the new generation listed in one write, then the old ones removed.

    Parameters
    ----------
    store : path or URL
        A Zarr pile store with generations (of :func:`append`).
    progress : bool, default False
        Show a progress bar.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    copy_memory : int or str, default "64MiB"
        About how much one copying task reads and writes, in bytes or as a
        size such as "64MiB".

    Returns
    -------
    list of Generation
        The one live generation.

    Examples
    --------
    >>> import daskshuffle
    >>> [g.generation for g in daskshuffle.generations("window.zarr")]  # raw.zarr, then day-2.zarr appended
    [0, 1]
    >>> [(g.generation, g.n_rows) for g in daskshuffle.compact("window.zarr")]
    [(2, 2000)]
    """
    location = Location.of(parse_path(store, "store"), storage_options)
    progress = parse_bool(progress, "progress")
    copy_nbytes = parse_nbytes(copy_memory, "copy_memory")
    with exclusive(location):
        root = store_io.read_root(location)
        _repair(location, root)  # a compaction killed before it was listed is done again
        entries = root[store_io.GENERATIONS_KEY]
        if len(entries) > 1:
            number = max(int(entry["generation"]) for entry in entries) + 1
            try:  # generation ``number``: every live row, in the same order, listed alone in the root
                store_io.ensure_group(location)
                alignment, row_nbytes = store_io.create_compacted(location, number, root)
                step = max(alignment, copy_nbytes // max(row_nbytes, 1) // alignment * alignment)
                n_rows = int(root["n_rows"])
                spans = [(location, number, start, min(start + step, n_rows)) for start in range(0, n_rows, step)]
                token = f"compact-{location.url}-{number}-{root['fingerprint']}"
                map_tasks(_copy_rows, spans, token=token, progress=progress)
                crash_point("compact copied")
                compacted = store_io.write_root(location, root, [store_io.finish_compacted(location, number)])
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                _repair(location, store_io.read_root(location))  # the generation being written, unlisted, goes
                raise StorageFullError(
                    f"Expected room in {location.url!r} for the compacted generation (as large as the live rows). "
                    f"Got a full disk ({error}) instead; what compact wrote is removed and the store reads as "
                    "before. Free space and compact again."
                ) from error
            crash_point("compact listed")
            for entry in entries:
                store_io.remove_generation(location, entry, root["variables"])
            crash_point("compact removed")
            store_io.consolidate(location)
            root = compacted
    return _records(root)
