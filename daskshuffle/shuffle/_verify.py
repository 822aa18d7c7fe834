"""``verify``: proof that a pile store holds exactly the rows of its source, in any order.

Each row of each variable is hashed to 64 bits (its bytes for fixed-size
values; every byte with its position, and the length, for variable-size ones;
nulls as a value of their own), and the hashes are summed modulo 2**64. The sum
does not depend on the order of the rows, so a shuffle leaves it unchanged, and
a changed, missing, duplicated or extra row changes it (but for a chance of
about 2**-64). A second sum over a hash of each whole row (all variables
together) catches rows whose variables were paired wrongly.

The source is read through its format's block reads and the store through
:func:`~daskshuffle.formats.open_pile_reader`, whose per-chunk checks raise
:class:`~daskshuffle.CorruptPileStoreError` on a damaged chunk; both run as
tasks on the active dask scheduler, like a shuffle.
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
from ..formats import open_pile_reader
from ..formats._base import CollectionFormat, CollectionSource, FileFormat, Format
from ..formats._generations import GENERATIONS_KEY, sources_of
from ..plan._options import DEFAULT_BLOCK_MEMORY
from ..plan._plan import fingerprint
from ..storage._location import Location
from ._compute import map_tasks
from ._store_plan import run_lengths

__all__ = ["VerifyResult", "verify"]

U64 = NDArray[np.uint64]
_MASK = 2**64 - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NULL = np.uint64(0x6A09E667F3BCC909)
#: Bytes of variable-size values hashed at once (each byte takes 8 while it is hashed).
_BYTES_AT_ONCE = 4 * 2**20


def _const(k: int) -> np.uint64:
    """The ``k``-th of a sequence of distinct 64-bit constants (computed in Python: no overflow warning)."""
    return np.uint64((k * 0x9E3779B97F4A7C15) & _MASK)


def _mix(x: U64) -> U64:
    """A 64-bit finaliser (splitmix64): every input bit changes about half the output bits."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _fixed_hashes(values: NDArray[Any]) -> U64:
    """A hash of each row's bytes, for arrays of fixed-size values (any row shape)."""
    if values.dtype.byteorder == ">":  # the same values hash the same in either byte order
        values = values.astype(values.dtype.newbyteorder("<"))
    n_rows = len(values)
    width = values.dtype.itemsize * int(np.prod(values.shape[1:], dtype=np.int64))
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(n_rows, width)
    if width % 8:
        padded = np.zeros((n_rows, -(-width // 8) * 8), dtype=np.uint8)
        padded[:, :width] = raw
        raw = padded
    words = raw.view(np.uint64)
    hashes = _mix(np.full(n_rows, _const(width + 1), dtype=np.uint64))
    for column in range(words.shape[1]):
        hashes = _mix(hashes ^ _mix(words[:, column] + _const(column + 2)))
    return hashes


def _bytes_hashes(offsets: NDArray[np.int64], data: NDArray[np.uint8]) -> U64:
    """A hash of each variable-size value ``data[offsets[i]:offsets[i + 1]]``."""
    n_rows = len(offsets) - 1
    hashes = np.empty(n_rows, dtype=np.uint64)
    first = 0
    while first < n_rows:
        # Rows whose bytes fit _BYTES_AT_ONCE (at least one row).
        last = int(np.searchsorted(offsets, offsets[first] + _BYTES_AT_ONCE, side="right")) - 1
        last = min(max(last, first + 1), n_rows)
        lo, hi = int(offsets[first]), int(offsets[last])
        row_of = np.repeat(np.arange(last - first), np.diff(offsets[first : last + 1]))
        position = np.arange(lo, hi, dtype=np.int64) - offsets[first:last][row_of]
        terms = _mix((position.astype(np.uint64) << np.uint64(8)) + data[lo:hi].astype(np.uint64) + _GOLDEN)
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
        relative = offsets[first : last + 1] - lo
        per_row = sums[relative[1:]] - sums[relative[:-1]]
        lengths = np.diff(offsets[first : last + 1]).astype(np.uint64)
        hashes[first:last] = _mix(per_row ^ _mix(lengths + _GOLDEN))
        first = last
    return hashes


def _arrow_hashes(column: Any) -> U64:
    """A hash of each value of an Arrow column (chunked or not), nulls included."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        parts = [_arrow_hashes(chunk) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.empty(0, np.uint64)
    kind = column.type
    if pa.types.is_dictionary(kind):
        return _arrow_hashes(column.dictionary_decode())
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind):
        hashes = _fixed_hashes(
            pc.fill_null(column, False if pa.types.is_boolean(kind) else 0).to_numpy(zero_copy_only=False)
        )
    elif pa.types.is_temporal(kind) and kind.bit_width in (32, 64):
        integers = column.view(pa.int64() if kind.bit_width == 64 else pa.int32())
        hashes = _fixed_hashes(pc.fill_null(integers, 0).to_numpy(zero_copy_only=False))
    elif (
        pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_large_binary(kind)
    ):
        binary = column.cast(pa.large_binary())
        _, offsets, data = binary.buffers()
        offsets_array = np.frombuffer(offsets, dtype=np.int64)[binary.offset : binary.offset + len(binary) + 1]
        hashes = _bytes_hashes(
            offsets_array, np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
        )
    else:  # nested and other types: each value's canonical text (slower, and rare in training data)
        texts = pa.array([repr(value).encode() for value in column.to_pylist()], type=pa.large_binary())
        return _arrow_hashes(texts) ^ _mix(np.full(len(column), _NULL, dtype=np.uint64))
    if column.null_count:
        hashes = np.where(column.is_null().to_numpy(zero_copy_only=False), _NULL, hashes)
    return hashes


def _row_hashes(rows: Any, variables: Sequence[str]) -> dict[str, U64]:
    """One hash per row and variable: ``rows`` is a dict of numpy arrays or a ``pyarrow.Table``."""
    if isinstance(rows, Mapping):
        return {name: _fixed_hashes(np.asarray(rows[name])) for name in variables}
    return {name: _arrow_hashes(rows.column(name)) for name in variables}


def checksum(rows: Any, variables: Sequence[str]) -> dict[str, Any]:
    """Rows, and the sum of their hashes per variable and of whole rows: order-independent, and additive."""
    hashes = _row_hashes(rows, variables)
    whole = np.zeros(len(next(iter(hashes.values()))) if hashes else 0, dtype=np.uint64)
    for index, name in enumerate(variables):
        whole = whole + _mix(hashes[name] ^ _const(index + 1))
    return {
        "n_rows": len(whole),
        "sums": {name: int(values.sum(dtype=np.uint64)) for name, values in hashes.items()},
        "rows": int(_mix(whole).sum(dtype=np.uint64)),
    }


def _add(parts: Sequence[dict[str, Any]], variables: Sequence[str]) -> dict[str, Any]:
    return {
        "n_rows": sum(part["n_rows"] for part in parts),
        "sums": {name: sum(part["sums"][name] for part in parts) & _MASK for name in variables},
        "rows": sum(part["rows"] for part in parts) & _MASK,
    }


def _part(
    side: str, variables: list[str], fmt: FileFormat[Any], block: int, store: Location | None, piles: range
) -> tuple[str, dict[str, Any]]:
    """One task: the checksum of a block of the source, or of a run of piles of the store."""
    if side == "source" or store is None:
        return side, checksum(fmt.read_block(block), variables)
    return side, _store_piles(store, variables, piles)


def _store_piles(store: Location, variables: list[str], piles: range) -> dict[str, Any]:
    reader = open_pile_reader(store, variables=variables)
    try:
        return _add([checksum(reader.read_pile(pile), variables) for pile in piles], variables)
    finally:
        reader.close()


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
        The order-independent checksum of each variable (hex), equal on both sides.
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
        from ..formats._zarr import open_zarr_sources

        return open_zarr_sources(
            sources, variables=variables, block_nbytes=block_nbytes, storage_options=storage_options
        )
    if kind == "parquet":
        from ..formats._parquet import open_parquet_sources
        from ..formats._parquet_store import ParquetWriting

        return open_parquet_sources(
            sources,
            columns=variables,
            block_nbytes=block_nbytes,
            writing=ParquetWriting(),
            storage_options=storage_options,
        )
    raise DaskShuffleValueError(f"Expected a Zarr or Parquet pile store. Got a {kind!r} store instead.")


def _group_piles(pile_offsets: NDArray[np.int64], block_nbytes: int, row_nbytes: int) -> list[tuple[int, int]]:
    """Runs of piles ``(first, last)`` of about ``block_nbytes`` each (at least one pile): one task each."""
    rows_per_task = max(1, block_nbytes // max(row_nbytes, 1))
    groups, first = [], 0
    n_piles = len(pile_offsets) - 1
    while first < n_piles:
        last = first + 1
        while last < n_piles and pile_offsets[last + 1] - pile_offsets[first] <= rows_per_task:
            last += 1
        groups.append((first, last))
        first = last
    return groups


def verify(
    store: str | os.PathLike[str],
    *sources: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    block_memory: int | str = DEFAULT_BLOCK_MEMORY,
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
        the checksums differ, their blocks) differ from what the store records.
    VerificationError
        The rows differ; the error names the variable (``error.variable``).
    CorruptPileStoreError
        A chunk of the store is missing, truncated or fails its checksum.

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
    named: list[str],
    *,
    storage_options: dict[str, Any] | None,
    block_nbytes: int,
    progress: bool,
    path: str | os.PathLike[str] | None = None,
) -> VerifyResult:
    """:func:`verify` of the pile store at ``location``, against ``named`` (or the sources it recorded).

    ``storage_options`` reach the sources, which the store only names.
    """
    began = time.perf_counter()
    path = os.fspath(path) if path is not None else location.url
    metadata, pile_offsets = _read_store(location)
    variables = list(metadata["variables"])
    given = bool(named)
    named = named or list(sources_of(metadata) or [])
    if not named:
        raise DaskShuffleValueError(
            f"Expected the sources of {path!r}. Got none instead: its shuffle read a dataframe or dataset in "
            "memory; pass the sources as files."
        )
    kind = str(metadata.get("kind"))
    fmt = _open_sources(kind, named, variables, block_nbytes, storage_options)
    source_rows = sum(fmt.block_lengths)
    if source_rows != int(metadata["n_rows"]):  # wrong or missing sources: nothing is read to tell
        raise _mismatch(path, metadata, named, given=given, rows=source_rows, blocks=None)
    tasks: list[tuple[Any, ...]] = [
        ("source", variables, fmt, block, None, range(0)) for block in range(len(fmt.block_lengths))
    ]
    tasks += [
        ("store", variables, None, -1, location, range(first, last))
        for first, last in _group_piles(pile_offsets, block_nbytes, fmt.row_nbytes)
    ]
    parts = map_tasks(_part, tasks, token=f"verify-{path}-{named}-{metadata.get('fingerprint')}", progress=progress)
    expected = _add([part for side, part in parts if side == "source"], variables)
    found = _add([part for side, part in parts if side == "store"], variables)
    if not _same(expected, found, variables):
        blocks = _block_lengths(fmt, kind, named, variables, block_nbytes, metadata, storage_options)
        if blocks is not None and run_lengths(blocks) != metadata["blocks"]["lengths"]:
            raise _mismatch(path, metadata, named, given=given, rows=source_rows, blocks=blocks)
    return _proven(path, named, expected, found, variables, began)


def verify_source(location: Location, fmt: Format[Any], *, block_nbytes: int, progress: bool) -> VerifyResult:
    """:func:`verify` of the pile store at ``location`` against ``fmt``, the source it was just shuffled from.

    For sources that no path names (a DataFrame, a dataset, dask arrays): their
    blocks are read (or computed) again, as the shuffle read them.
    """
    began = time.perf_counter()
    path = location.url
    metadata, pile_offsets = _read_store(location)
    variables = list(metadata["variables"])
    token = f"verify-{path}-{metadata.get('fingerprint')}"
    blocks = [(variables, fmt, location, block) for block in range(len(fmt.block_lengths))]
    if isinstance(fmt, CollectionSource):
        source_parts = map_tasks(_collection_part, blocks, token=token, progress=progress, inputs=fmt.block_inputs())
    else:
        source_parts = map_tasks(_file_part, blocks, token=token, progress=progress)
    store_parts = map_tasks(
        _store_piles,
        [
            (location, variables, range(first, last))
            for first, last in _group_piles(pile_offsets, block_nbytes, fmt.row_nbytes)
        ],
        token=token,
        progress=progress,
    )
    expected, found = _add(source_parts, variables), _add(store_parts, variables)
    return _proven(path, [], expected, found, variables, began)


def _read_store(location: Location) -> tuple[dict[str, Any], NDArray[np.int64]]:
    """The metadata and pile offsets of the pile store at ``location``, which its reader checks."""
    reader = open_pile_reader(location)
    try:
        return dict(reader.metadata), reader.pile_offsets
    finally:
        reader.close()


def _proven(
    path: str,
    sources: list[str],
    expected: dict[str, Any],
    found: dict[str, Any],
    variables: Sequence[str],
    began: float,
) -> VerifyResult:
    """The result of a verification whose checksums must agree: ``VerificationError`` where they do not."""
    _check_same(path, expected, found, variables)
    return VerifyResult(
        store=path,
        sources=sources,
        n_rows=found["n_rows"],
        checksums={name: f"{found['sums'][name]:016x}" for name in variables},
        seconds=time.perf_counter() - began,
    )


def _file_part(variables: list[str], fmt: FileFormat[Any], store: Location, block: int) -> dict[str, Any]:
    return checksum(fmt.stored_rows(store, fmt.read_block(block)), variables)


def _collection_part(
    variables: list[str], fmt: CollectionFormat[Any], store: Location, block: int, value: Any
) -> dict[str, Any]:
    return checksum(fmt.stored_rows(store, fmt.rows_of_block(block, value)), variables)


def _same(expected: dict[str, Any], found: dict[str, Any], variables: Sequence[str]) -> bool:
    return (
        found["n_rows"] == expected["n_rows"]
        and found["rows"] == expected["rows"]
        and all(found["sums"][name] == expected["sums"][name] for name in variables)
    )


def _check_same(path: str, expected: dict[str, Any], found: dict[str, Any], variables: Sequence[str]) -> None:
    """Raise ``VerificationError`` naming what differs, if the store's checksums are not the source's."""
    if found["n_rows"] != expected["n_rows"]:
        raise VerificationError(
            f"Expected {path!r} to hold the {expected['n_rows']:,} rows of its source. Got {found['n_rows']:,} "
            "rows instead; the store was damaged after the shuffle: shuffle the source again, replacing the store."
        )
    differ = [name for name in variables if found["sums"][name] != expected["sums"][name]]
    if differ:
        name = differ[0]
        raise VerificationError(
            (
                f"Expected variable {name!r} of {path!r} to hold the same rows as its source. Got different values "
                "(the checksums differ) instead, from sources of the same rows and blocks as the store records; a "
                "row of the store (or of the sources, in place) was changed, lost or added: shuffle the source again, replacing the store."
            ),
            variable=name,
        )
    if found["rows"] != expected["rows"]:
        raise VerificationError(
            f"Expected the rows of {path!r} to pair their variables as the source does. Got rows whose "
            f"variables {list(variables)} were paired differently instead; shuffle the source again, replacing the store."
        )


def _block_lengths(
    fmt: FileFormat[Any],
    kind: str,
    sources: list[str],
    variables: list[str],
    block_nbytes: int,
    metadata: Mapping[str, Any],
    storage_options: Any,
) -> list[int] | None:
    """The sources' block lengths as the shuffle cut them (its ``block_memory``), if the store records its own."""
    recorded = metadata.get("blocks")
    if GENERATIONS_KEY in metadata or not isinstance(recorded, Mapping) or "lengths" not in recorded:
        return None  # generations each record their own blocks; an older store none
    shuffled_nbytes = int(recorded.get("block_memory", block_nbytes))
    if shuffled_nbytes != block_nbytes:
        fmt = _open_sources(kind, sources, variables, shuffled_nbytes, storage_options)
    return [int(length) for length in fmt.block_lengths]


def _mismatch(
    path: str, metadata: Mapping[str, Any], sources: list[str], *, given: bool, rows: int, blocks: list[int] | None
) -> SourceMismatchError:
    """The sources are not those ``path`` was made from: the counts compared, and what to pass instead."""
    compared = [f"rows: the store {int(metadata['n_rows']):,}, the sources {rows:,}"]
    recorded = metadata.get("blocks")
    if isinstance(recorded, Mapping) and GENERATIONS_KEY not in metadata and blocks is not None:
        runs = recorded.get("lengths") or []
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
    return SourceMismatchError(
        f"Expected the sources {sources} to hold the rows {path!r} was made from. Got sources that differ from what "
        f"it records instead ({'; '.join(compared)}); {advice}."
    )
