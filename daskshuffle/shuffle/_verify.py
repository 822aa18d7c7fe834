"""``verify``: proof that a pile store holds exactly the rows of its source, in any order.

Both sides are summed to an order-independent checksum (``_checksum.py``) in one
graph; where they differ, the error says whether the sources or the store are to blame.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._errors import DaskShuffleValueError, SourceMismatchError, VerificationError
from .._parse import parse_nbytes, parse_path
from ..formats import CollectionSource, FileFormat, Format
from ..pilestore import GENERATIONS_KEY, metadata_disagrees, sources_of
from ..plan import fingerprint, merge_runs
from ..readers import open_pile_reader
from ..storage import Location, changed_entries
from ._checksum import add_checksums, checksum
from ._compute import map_tasks
from ._destination import check_workers_access
from ._store_plan import missing_identity, run_lengths, shown_changes

__all__ = ["VerifyResult", "sources_changed", "verify"]


def _part(
    variables: list[str], store: Location, fmt: Format[Any] | None, item: Any, value: Any = None
) -> dict[str, Any]:
    """One task: the checksum of the run of piles ``item`` of ``store`` (``fmt`` None), or of block ``item`` of the
    source ``fmt`` as ``store`` stores its rows (a dask collection's block computed: ``value``)."""
    if fmt is None:
        with open_pile_reader(store, variables=variables) as reader:
            return add_checksums([checksum(reader.read_pile(pile), variables) for pile in item], variables)
    rows = fmt.rows_of_block(item, value) if isinstance(fmt, CollectionSource) else fmt.read_block(item)
    return checksum(fmt.stored_rows(store, rows), variables)


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify` proved: the store and its sources hold the same rows.

    Attributes
    ----------
    store : str
        The pile store.
    sources : list of str
        The sources it was compared with.
    n_rows : int
        Rows in each.
    checksums : dict
        The order-independent checksum of each variable (hex), equal on both sides (of this version of
        daskshuffle: another may hash differently).
    seconds : float
        Wall time.
    """

    store: str
    sources: list[str]
    n_rows: int
    checksums: dict[str, str] = field(repr=False)
    seconds: float

    def __repr__(self) -> str:
        return (
            f"<VerifyResult {self.store!r}: the same {self.n_rows:,} rows as its source, "
            f"variables {sorted(self.checksums)}, {self.seconds:.1f} s>"
        )


def _open_sources(
    kind: str, sources: list[str], variables: list[str], block_nbytes: int, storage_options: Any
) -> FileFormat[Any]:
    if kind == "zarr":
        from ..sources import open_zarr_sources

        return open_zarr_sources(
            sources, variables=variables, block_nbytes=block_nbytes, storage_options=storage_options
        )
    if kind == "parquet":
        from ..pilestore import ParquetWriting
        from ..sources import open_parquet_sources

        return open_parquet_sources(
            sources,
            columns=variables,
            block_nbytes=block_nbytes,
            writing=ParquetWriting(),
            storage_options=storage_options,
        )
    raise DaskShuffleValueError(f"Expected a Zarr or Parquet pile store. Got a {kind!r} store instead.")


def verify(
    store: str | os.PathLike[str],
    *sources: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    block_memory: int | str = "64MiB",
    progress: bool = False,
) -> VerifyResult:
    """Prove that a pile store holds exactly the rows of its sources: none lost, changed or added.

    Every row of the store and of the sources is read once, on the active dask
    scheduler, and an order-independent checksum of each variable is compared
    (a 64-bit hash of each row's bytes, summed modulo 2**64, and the row count),
    as well as one of whole rows, which catches variables paired wrongly.

    Parameters
    ----------
    store : path or URL
        A complete Zarr or Parquet pile store.
    *sources : path or URL
        The sources, as given to the shuffle. By default the sources the
        store recorded.
    storage_options : dict, optional
        Passed to fsspec for URLs.
    block_memory : int or str, default "64MiB"
        About how much one task reads.
    progress : bool, default False
        Show a progress bar.

    Returns
    -------
    VerifyResult

    Raises
    ------
    SourceMismatchError
        The sources are not those the store was made from: their rows (or, when
        the checksums differ, their blocks) differ from what the store records,
        or they changed since the shuffle (the files that changed are named,
        from the sources' identity, which is compared first).
    VerificationError
        The rows differ; the error names the variable (``error.variable``), and
        says the store's rows changed where the sources' files are as recorded.
    CorruptPileStoreError
        A chunk of the store is missing, truncated or fails its checksum.
    StorageAccessError
        The storage did not serve a request (credentials, throttling, timeouts), from
        this process or from some of the cluster's workers; nothing is damaged.

    Examples
    --------
    >>> import daskshuffle
    >>> daskshuffle.verify("piles.zarr", "raw.zarr")
    <VerifyResult 'piles.zarr': the same 1,000 rows as its source, variables ['id', 'x', 'y'], ... s>
    """
    location = Location.of(parse_path(store, "store"), storage_options)  # absolute: the tasks may run elsewhere
    block_nbytes = parse_nbytes(block_memory, "block_memory")
    named = [parse_path(source, "sources") for source in sources]
    return verify_location(
        location, named, storage_options=storage_options, block_nbytes=block_nbytes, progress=progress, path=store
    )


def verify_location(
    location: Location,
    against: list[str] | Format[Any],
    *,
    block_nbytes: int,
    progress: bool,
    storage_options: dict[str, Any] | None = None,
    path: str | os.PathLike[str] | None = None,
) -> VerifyResult:
    """:func:`verify` of the pile store at ``location``, against the sources ``against`` names (none: those it
    recorded), or against the format of the source it was just shuffled from (a DataFrame, a dataset, dask arrays:
    no path names them), whose blocks are read again."""
    began = time.perf_counter()
    path = os.fspath(path) if path is not None else location.url
    metadata, pile_offsets = _read_store(location)
    variables = list(metadata["variables"])
    kind = str(metadata.get("kind"))
    named: list[str] = []
    changed: list[str] | None = []  # a source in memory is read again: nothing of it to compare first
    fmt: Format[Any]
    if not isinstance(against, list):
        fmt = against
    else:
        named = against or list(sources_of(metadata) or [])
        if not named:
            raise DaskShuffleValueError(
                f"Expected the sources of {path!r}. Got none instead: its shuffle read a dataframe or dataset in "
                "memory; pass the sources as files."
            )
        fmt = _open_sources(kind, named, variables, block_nbytes, storage_options)
        # First what the sources' identity says (their files' names, sizes and versions): it names the side that changed.
        changed = _changes(metadata, fmt.identity) if fmt.source_names == metadata.get("source") else None
        source_rows = sum(fmt.block_lengths)
        if source_rows != int(metadata["n_rows"]):  # wrong or missing sources: nothing is read to tell
            raise _mismatch(path, metadata, named, given=bool(against), rows=source_rows, blocks=None, changed=changed)
    # The workers read the store and the sources: with credentials of their own, which may lack this process's.
    check_workers_access([location, *(Location.of(source, storage_options) for source in named)])
    # The checksums of the sources and of the store: each read once, in one graph of tasks run at once.
    n_blocks = len(fmt.block_lengths)
    tasks: list[tuple[Any, ...]] = [(variables, location, fmt, block) for block in range(n_blocks)]
    groups = merge_runs(np.diff(pile_offsets), fmt.row_nbytes, max(block_nbytes, 1))
    tasks += [(variables, location, None, range(first, last)) for first, last in groups]
    inputs = None
    if isinstance(fmt, CollectionSource):  # the store's tasks take no block: a key of nothing
        graph, keys = fmt.block_inputs()
        inputs = ({**graph, "daskshuffle-verify-nothing": None}, [*keys, *["daskshuffle-verify-nothing"] * len(groups)])
    token = f"verify-{path}-{named}-{metadata.get('fingerprint')}"
    parts = map_tasks(_part, tasks, token=token, progress=progress, inputs=inputs)
    expected, found = add_checksums(parts[:n_blocks], variables), add_checksums(parts[n_blocks:], variables)
    # Where the sources are files and the checksums differ: are they the blocks the shuffle read (each generation
    # records its own blocks: not compared)?
    if named and found != expected:  # rows counted, each variable's sum, the sum of whole rows
        if GENERATIONS_KEY not in metadata:
            shuffled_nbytes = int(metadata["blocks"]["block_memory"])
            if shuffled_nbytes != block_nbytes:
                fmt = _open_sources(kind, named, variables, shuffled_nbytes, storage_options)
            blocks = [int(length) for length in fmt.block_lengths]
            if run_lengths(blocks) != metadata["blocks"]["lengths"]:
                raise _mismatch(
                    path, metadata, named, given=bool(against), rows=source_rows, blocks=blocks, changed=changed
                )
        if changed:  # the sources no longer hold the store's rows
            raise SourceMismatchError(
                f"Expected the sources of {path!r} to hold the rows it was shuffled from. Got other rows, from sources "
                f"changed since the shuffle instead: {shown_changes(changed)}; restore them, or shuffle them again, "
                "replacing the store (overwrite=True)."
            )
    return _proven(path, named, expected, found, variables, began, sources_unchanged=changed == [])


def _read_store(location: Location) -> tuple[dict[str, Any], NDArray[np.int64]]:
    """The metadata and pile offsets of the store at ``location``; one generation without its sources' identity
    and blocks is refused as damaged."""
    with open_pile_reader(location) as reader:
        metadata, pile_offsets = dict(reader.metadata), reader.pile_offsets
    if GENERATIONS_KEY not in metadata:
        damaged = missing_identity(metadata, location.url)
        if damaged is not None:
            raise damaged
        blocks = metadata.get("blocks")
        if not isinstance(blocks, Mapping) or not {"block_memory", "lengths"} <= blocks.keys():
            raise metadata_disagrees(
                location.url, "the blocks its shuffle read, blocks: {block_memory, lengths}", f"{blocks!r}"
            )
    return metadata, pile_offsets


def _proven(
    path: str,
    sources: list[str],
    expected: dict[str, Any],
    found: dict[str, Any],
    variables: Sequence[str],
    began: float,
    *,
    sources_unchanged: bool = True,
) -> VerifyResult:
    """The result of a verification whose checksums must agree: ``VerificationError`` naming what differs where
    they do not. ``sources_unchanged``: the sources' identity is what the store records (else unknown).
    """
    if found["n_rows"] != expected["n_rows"]:
        raise VerificationError(
            f"Expected {path!r} to hold the {expected['n_rows']:,} rows of its source. Got {found['n_rows']:,} "
            "rows instead; the store was damaged after the shuffle: shuffle the source again, replacing the store."
        )
    differ = [name for name in variables if found["sums"][name] != expected["sums"][name]]
    if differ:
        name = differ[0]
        if sources_unchanged:
            blame = (
                "from sources whose files have the names, sizes and versions the store records; so a row of the "
                "store was changed, lost or added since the shuffle (or a source file was edited in place keeping its "
                "size and modification time)"
            )
        else:
            blame = (
                "from sources of the same rows and blocks as the store records; a row of the store (or of the "
                "sources, in place) was changed, lost or added"
            )
        raise VerificationError(
            (
                f"Expected variable {name!r} of {path!r} to hold the same rows as its source. Got different values "
                f"(the checksums differ) instead, {blame}: shuffle the source again, replacing the store."
            ),
            variable=name,
        )
    if found["rows"] != expected["rows"]:
        raise VerificationError(
            f"Expected the rows of {path!r} to pair their variables as the source does. Got rows whose "
            f"variables {list(variables)} were paired differently instead; shuffle the source again, replacing the store."
        )
    return VerifyResult(
        store=path,
        sources=sources,
        n_rows=found["n_rows"],
        checksums={name: f"{found['sums'][name]:016x}" for name in variables},
        seconds=time.perf_counter() - began,
    )


def _changes(metadata: Mapping[str, Any], now: list[dict[str, Any]]) -> list[str] | None:
    """What changed in the sources since the store's shuffle, from their identity; ``None``: cannot tell (several
    generations, a dask collection, a Zarr source too large to list every chunk)."""
    recorded = metadata.get("source_identity")  # none: damaged (verify refuses such a store before it asks)
    if GENERATIONS_KEY in metadata or not isinstance(recorded, list) or not recorded:
        return None
    if any("token" in entry or entry.get("listed") is False for entry in [*recorded, *now]):
        return None
    return changed_entries(recorded, now)


def sources_changed(metadata: Mapping[str, Any], storage_options: dict[str, Any] | None = None) -> list[str] | None:
    """What changed since the shuffle in the sources a store's ``metadata`` records: ``[]`` nothing, ``None`` unknown.

    Looks at the sources' files (no row is read) as a rerun of the shuffle does.

    Examples
    --------
    >>> from daskshuffle.pilestore import read_metadata
    >>> sources_changed(read_metadata("piles.parquet"))
    []
    """
    sources = metadata.get("source")
    if _changes(metadata, []) is None or not isinstance(sources, list) or not sources:
        return None
    kind, variables = str(metadata.get("kind")), list(metadata.get("variables") or [])
    if kind == "parquet":
        from ..sources import list_parquet_sources

        return _changes(metadata, list_parquet_sources(sources, storage_options).identity)
    block_nbytes = parse_nbytes("64MiB", "block_memory")  # the shuffles' default; only the identity is read
    fmt = _open_sources(kind, sources, variables, block_nbytes, storage_options)
    return _changes(metadata, fmt.identity)


def _mismatch(
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
