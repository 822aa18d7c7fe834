"""Binding every chunk of a Zarr pile store to its run, its variable and its place.

A chunk's crc32c proves its bytes intact, not that they are this variable's
chunk at this place from this run: each array's directory holds a table of its
chunks' crc32c, and the metadata records the run and a seal over all of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .._errors import CorruptPileStoreError
from ..formats import crc32c
from ..storage import Location, _own, fetched_each, raise_storage_failure
from ._groups import open_arrays, open_group
from ._metadata import RUN_KEY, metadata_disagrees, seal_of

if TYPE_CHECKING:
    import zarr
    import zarr.storage

    from ._recording import RecordingStore

__all__ = ["bind", "carries_crc", "check_arrays", "read_tables", "save_records"]

#: The table of each variable's chunk crc32c, in its array's directory.
TABLE = "daskshuffle-crc32c"
#: The records of each write of a shuffle's tasks, in each array's directory until the run finishes.
WRITES = "daskshuffle-writes"


def carries_crc(array: zarr.Array[Any]) -> bool:
    """Whether ``array``'s chunks end with their crc32c (its last codec), as a pile store's do."""
    from zarr.codecs import Crc32cCodec

    codecs = list(array.compressors)
    return bool(codecs) and isinstance(codecs[-1], Crc32cCodec)


def save_records(
    location: Location, group: zarr.Group, recording: RecordingStore, names: Sequence[str], start: int, n_rows: int
) -> None:
    """Write what ``recording`` saw of the arrays ``names`` written at rows ``start:start + n_rows``.

    A file ``<array>/daskshuffle-writes/<first chunk>`` holds the crc32c of the
    chunks written from that one on. A task run again writes the same bytes.
    """
    import zarr
    import zarr.storage

    for name in names:
        array = group[name]
        assert isinstance(array, zarr.Array)
        if not carries_crc(array) or not array.ndim or n_rows <= 0:
            continue
        encode = array.metadata.chunk_key_encoding.encode_chunk_key  # type: ignore[union-attr]
        rows, inner = int(array.chunks[0]), (0,) * (array.ndim - 1)
        keys = {
            f"{array.path}/{encode((index, *inner))}": index
            for index in range(start // rows, -(-(start + n_rows) // rows))
        }
        found = {index: recording.recorded[key] for key, index in keys.items() if key in recording.recorded}
        if found:
            writes = location.join(f"{array.path}/{WRITES}")
            writes.makedirs()
            for first, crcs in _runs(found):
                writes.join(str(first)).write_whole(np.asarray(crcs, dtype="<u4").tobytes())


def _runs(found: Mapping[int, int]) -> list[tuple[int, list[int]]]:
    """Consecutive chunk indices of ``found`` as ``(first, [crc, ...])``."""
    runs: list[tuple[int, list[int]]] = []
    for index in sorted(found):
        if runs and runs[-1][0] + len(runs[-1][1]) == index:
            runs[-1][1].append(found[index])
        else:
            runs.append((index, [found[index]]))
    return runs


def array_record(array: zarr.Array[Any]) -> dict[str, Any]:
    """What a reader relies on of ``array``, as its ``zarr.json`` records it: compared on every open."""
    described = array.metadata.to_dict()
    kept = ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "codecs", "storage_transformers", "zarr_format")
    record = {key: described.get(key) for key in kept}
    record["fill_value"] = str(described.get("fill_value"))
    # As JSON gives it back (tuples as lists), so that a record compares equal to itself read again.
    normalized: dict[str, Any] = json.loads(json.dumps(record, default=str))
    return normalized


def check_arrays(metadata: Mapping[str, Any], where: str, arrays: Mapping[str, zarr.Array[Any]]) -> None:
    """Refuse arrays whose ``zarr.json`` is not what the run recorded (a store sealed with its arrays' records).

    Dtype, byte order, shape, chunks, codecs: an edited byte order would
    read every value byte-swapped, an edited shape or chunking misplaced rows.
    """
    recorded = metadata.get("arrays")
    for name, array in arrays.items():
        if not isinstance(recorded, Mapping) or not isinstance(recorded.get(name), Mapping):
            raise metadata_disagrees(where, f"a record of array {name!r} under 'arrays'", "none")
        expected = {key: value for key, value in recorded[name].items() if key != "chunk_crc32c"}
        got = array_record(array)
        if expected != got:
            differ = sorted(key for key in {*expected, *got} if expected.get(key) != got.get(key))
            raise metadata_disagrees(
                where,
                f"array {name!r} as the shuffle recorded it ({', '.join(f'{key} = {expected.get(key)!r}' for key in differ)})",
                f"{', '.join(f'{key} = {got.get(key)!r}' for key in differ)} in its zarr.json",
            )


def bind(location: Location, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` bound to what the run wrote at ``location``: each array's record and crc32c table, sealed.

    Gathers the records of every write into one table per variable (every
    chunk must have been written: a chunk missing from the records is an
    error), and removes the records. Runs once every task has written.
    """
    import zarr

    if not isinstance(metadata.get(RUN_KEY), str):  # drawn before the run's first write (kept when it resumes)
        raise metadata_disagrees(location.url, f"the run that wrote it, {RUN_KEY}", f"{metadata.get(RUN_KEY)!r}")
    names = metadata["variables"]
    arrays: dict[str, Any] = {}
    for name, array in zip(names, open_arrays(location, open_group(location), names), strict=True):
        assert isinstance(array, zarr.Array)
        record = array_record(array)
        if carries_crc(array) and array.ndim:
            table = _gather(location.join(array.path), array, name)
            location.join(f"{array.path}/{TABLE}").write_whole(table.tobytes())
            location.join(f"{array.path}/{WRITES}").remove()
            record["chunk_crc32c"] = {"n_chunks": len(table), "crc32c": crc32c(table.tobytes())}
        arrays[name] = record
    bound = {**metadata, "arrays": arrays}
    return {**bound, "seal": seal_of(bound)}  # of everything but a seal it held


def _gather(array_location: Location, array: zarr.Array[Any], name: str) -> NDArray[np.uint32]:
    n_chunks = -(-int(array.shape[0]) // int(array.chunks[0]))
    table = np.zeros(n_chunks, dtype="<u4")
    seen = np.zeros(n_chunks, dtype=bool)
    writes = array_location.join(WRITES)
    names = writes.names()
    with writes.reaching():  # each record within the request deadline
        contents = fetched_each(writes.fs, [f"{writes.path}/{name}" for name in names])
    for name, data in zip(names, contents, strict=True):
        if isinstance(data, BaseException):
            raise_storage_failure(data, writes.url, what=name)
            raise data
        first = int(name)
        crcs = np.frombuffer(data, dtype="<u4")
        table[first : first + len(crcs)] = crcs
        seen[first : first + len(crcs)] = True
    if not seen.all():
        missing = int(np.flatnonzero(~seen)[0])
        raise CorruptPileStoreError(
            f"Expected a record of every chunk written to variable {name!r} of {array_location.url!r}. Got none of "
            f"chunk {missing} (of {n_chunks}) instead; the shuffle's tasks did not all write: run it again."
        )
    return table


def read_tables(location: Location, metadata: Mapping[str, Any], paths: Mapping[str, str]) -> dict[str, NDArray[Any]]:
    """The crc32c table of each variable of ``paths`` (name: its array's path), checked against the metadata's record.

    One request for all of them on object storage. Every store records a table
    for each variable: a record that is missing, or a table that is missing,
    of another size or whose crc32c is not the recorded one, is a
    :class:`~daskshuffle.CorruptPileStoreError`.
    """
    if location.is_local:  # read through a link, an array would be another store's: refused before any read
        for path in paths.values():
            _own.refuse(f"{location.path}/{path}", "an array's directory", directory=True)
            _own.refuse(f"{location.path}/{path}/c", "chunks' directory", directory=True)
            _own.refuse(f"{location.path}/{path}/{TABLE}", "a crc32c table")
    records: dict[str, Any] = {
        name: ((metadata.get("arrays") or {}).get(name) or {}).get("chunk_crc32c") for name in paths
    }
    for name, record in records.items():
        if not isinstance(record, Mapping) or {"n_chunks", "crc32c"} - set(record):
            raise metadata_disagrees(
                location.url, f"the crc32c table of every chunk of variable {name!r} (arrays → chunk_crc32c)", "none"
            )
    if not records:
        return {}
    files = {name: f"{location.path}/{paths[name]}/{TABLE}" for name in records}
    with location.reaching():
        found = dict(zip(files, fetched_each(location.fs, list(files.values())), strict=True))
    tables = {}
    for name, record in records.items():
        data = found[name]
        if isinstance(data, BaseException):  # not served (throttled, refused, no answer): nothing is damaged
            raise_storage_failure(data, location.url, what=files[name])
        expected = (4 * int(record["n_chunks"]), int(record["crc32c"]))
        got = (len(data), crc32c(data)) if isinstance(data, bytes) else None
        if got != expected:
            raise CorruptPileStoreError(
                f"Expected {files[name]!r}, the crc32c of every chunk of variable {name!r} of pile store "
                f"{location.url!r}, to hold {expected[0]:,} bytes of crc32c {expected[1]}. Got "
                f"{'no such file' if got is None else f'{got[0]:,} bytes of crc32c {got[1]}'} instead; the store is "
                "damaged: restore it from a copy, or shuffle the source again."
            )
        assert isinstance(data, bytes)
        tables[name] = np.frombuffer(data, dtype="<u4")
    return tables
