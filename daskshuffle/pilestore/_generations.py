"""A Zarr pile store that grows: generations of piles, read as one store.

Each append is a generation, a complete pile store of its own in
``generations/<n>``; the root's metadata lists the live ones in one write, so
a reader opens the old list or the new one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._errors import CorruptPileStoreError, DaskShuffleValueError, IncompletePileStoreError
from ..plan import fingerprint
from ..storage import Leftover, Location, _leftovers, _lock, _own, crash_point
from . import _metadata, _zarr_store
from ._groups import consolidate_group, group_metadata, open_arrays, open_group
from ._zarr_store import write_rows

__all__ = [
    "GENERATIONS_KEY",
    "array_types",
    "consolidate",
    "consolidated",
    "create_compacted",
    "ensure_group",
    "entry_of",
    "finish_compacted",
    "generation_location",
    "generation_path",
    "leftovers",
    "read_root",
    "remove_generation",
    "sources_of",
    "write_root",
    "write_rows",
]

#: The key of the root metadata that lists the live generations.
GENERATIONS_KEY = "generations"
#: The group below the root that holds the generations after the first.
GROUP = "generations"
#: The suffixes of what a generation's shuffle writes beside it, in ``generations``.
_SCRATCH = (*_leftovers.SCRATCH_SUFFIXES, _lock.LOCK_SUFFIX)
#: The only paths a generation may have: the root, or a numbered group of ``generations``.
_PATH = re.compile(rf"{GROUP}/\d{{5,}}")


def generation_path(number: int) -> str:
    """Where generation ``number`` lives, relative to the store's root ("" for the first shuffle)."""
    return "" if number == 0 else f"{GROUP}/{number:05d}"


def generation_location(store: Location, relative: str) -> Location:
    """Where the generation at ``relative`` (as :func:`generation_path` spells it) is; any other path is refused.

    The path comes from the store's metadata: nothing it names may lie
    outside the store (``..``, an absolute path, a URL). On a local store,
    a symbolic link (or a file of another kind than a directory) at
    ``generations`` or at the generation itself is refused
    (:class:`~daskshuffle.UnsafePathError`): a generation is read, written
    and removed only in the store's own tree, never through a link.
    """
    if relative and not (isinstance(relative, str) and _PATH.fullmatch(relative)):
        raise CorruptPileStoreError(
            f"Expected the generations of the pile store {store.url!r} at '' or '{GROUP}/<number>'. Got {relative!r} "
            "instead; the metadata was edited or damaged, and nothing outside the store is read or removed."
        )
    if not relative:
        return store
    if store.is_local:
        for inner in (GROUP, relative):
            _own.refuse(store.join(inner).path, "a generation's directory", directory=True)
    return store.join(relative)


def read_root(store: Location, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The root metadata of a complete Zarr pile store (read, or as given), its generations listed (one if never appended to)."""
    if metadata is None:  # no Zarr group: what the store is (a Parquet store's sidecar) says what to do
        metadata = group_metadata(store)
        if metadata is None:
            _metadata.check_store_exists(store, store.url)
            metadata = _metadata.read_metadata(store)
    if not isinstance(metadata, dict) or not metadata.get("complete"):
        raise IncompletePileStoreError(
            f"Expected a complete Zarr pile store. Got {store.url!r}, which is not one, instead; pass the destination "
            "of a finished shuffle_zarr."
        )
    if metadata.get("kind") not in ("zarr", "xarray"):
        raise DaskShuffleValueError(
            f"Expected a Zarr pile store. Got a {metadata.get('kind')} pile store at {store.url!r} instead; generations "
            "are kept by Zarr pile stores only.",
            parameter="store",
        )
    _metadata.check_format_version(metadata, store.url)
    _metadata.check_variable_names(metadata, store.url)
    if GENERATIONS_KEY not in metadata:
        metadata = {**metadata, GENERATIONS_KEY: [entry_of(0, metadata, store.url, base=metadata)]}
    else:  # the root of a store that rows were appended to (a store of one generation is checked when opened)
        _metadata.check_recorded_rows(metadata, store.url, {})
        _check_entries(metadata[GENERATIONS_KEY], store.url)
    return dict(metadata)


def _check_entries(entries: object, where: str) -> None:
    """Refuse a list of generations that is not one: numbers that do not rise, a path not its number's."""
    if not isinstance(entries, list) or not entries or not all(isinstance(entry, dict) for entry in entries):
        raise _metadata.metadata_disagrees(where, "a list of the live generations", f"generations = {entries!r}"[:200])
    numbers = [entry.get("generation") for entry in entries]
    if not all(isinstance(number, int) and number >= 0 for number in numbers) or numbers != sorted(set(numbers)):
        raise _metadata.metadata_disagrees(where, "generation numbers that rise", f"generation numbers {numbers}")
    for entry in entries:
        expected = generation_path(entry["generation"])
        if entry.get("path") != expected:
            raise _metadata.metadata_disagrees(
                where,
                f"generation {entry['generation']} at {expected!r}, the only place it may be",
                f"path {entry.get('path')!r}",
            )


def entry_of(
    number: int, metadata: Mapping[str, Any], where: str, base: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What the root of the store at ``where`` records of generation ``number``, from its own checked metadata; with
    ``base``, the first shuffle's own metadata too, since the root's becomes the union."""
    entry = {
        "generation": number,
        "path": generation_path(number),
        "n_rows": int(metadata["n_rows"]),
        "pile_offsets": list(metadata["pile_offsets"]),
        "seed": int(metadata["seed"]),
        "fingerprint": metadata["fingerprint"],
        "source": sources_of(metadata, "source", where),
        "source_identity": sources_of(metadata, "source_identity", where),
    }
    if base is not None:
        entry["metadata"] = {key: value for key, value in base.items() if key != GENERATIONS_KEY}
    return entry


def consolidate(store: Location) -> None:
    """Consolidate the store's metadata again (for plain zarr and xarray), the root's attributes as they are."""
    consolidate_group(store, open_group(store, mode="r+"))


def write_root(store: Location, root: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Make ``entries`` the live generations: the root metadata that lists them (pile ``p`` is pile ``p`` of each,
    oldest first) replaces ``root`` in one write, then the store's metadata is consolidated again for plain zarr."""
    sizes = sum(np.diff(np.asarray(entry["pile_offsets"], dtype=np.int64)) for entry in entries)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    # The root lists its generations, each bound to its own run (the first's in its entry): the union is not.
    metadata = {key: value for key, value in root.items() if key != "fingerprint" and key not in _metadata.BOUND_KEYS}
    metadata.update(
        n_rows=int(offsets[-1]),
        pile_offsets=offsets.tolist(),
        generations=[dict(entry) for entry in entries],
    )
    metadata["fingerprint"] = fingerprint(metadata)
    group = open_group(store, mode="r+")
    group.attrs[_metadata.METADATA_KEY] = _metadata.metadata_attribute(metadata)
    crash_point("root listed")  # before it is consolidated: plain zarr sees the old generations
    consolidate(store)
    return metadata


def sources_of(metadata: Mapping[str, Any], key: str = "source", where: str = "the pile store") -> list[Any]:
    """The sources of every row of the store at ``where``, oldest generation first (``key="source_identity"``: their
    identities).

    Every store this version writes records both, as lists, in each
    generation: one that does not was edited or damaged, and is refused
    (:class:`~daskshuffle.CorruptPileStoreError`).

    Examples
    --------
    >>> sources_of({"source": ["raw.zarr"]})
    ['raw.zarr']
    >>> sources_of({"generations": [{"source": ["raw.zarr"]}, {"source": ["day-2.zarr"]}]})
    ['raw.zarr', 'day-2.zarr']
    """
    found: list[Any] = []
    for entry in metadata.get(GENERATIONS_KEY, [metadata]):
        recorded = entry.get(key)
        if not isinstance(recorded, list):
            raise _metadata.metadata_disagrees(
                where, f"its {key} (of each generation), a list", f"{key} = {recorded!r}"[:200]
            )
        found += recorded
    return found


def remove_generation(store: Location, entry: Mapping[str, Any], variables: Sequence[str]) -> None:
    """Delete a generation's files: its group, or for the first shuffle its arrays at the root."""
    if entry["path"]:
        generation_location(store, entry["path"]).remove()
        return
    for name in variables:  # plain names (read_root checked them): arrays of the root
        store.join(name).remove()


def leftovers(store: Location, root: Mapping[str, Any], tmp: Location | None = None) -> list[Leftover]:
    """Everything in ``store`` (and its generations' pieces under ``tmp``) that the ``root`` metadata does not list.

    Generations not listed, the first shuffle's arrays once evicted, a
    generation's scratch and the files zarr was writing when a step was
    killed; only names this library writes are looked at. The caller holds
    the store's lock, or knows that nobody does.
    """
    live = {entry["path"] for entry in root[GENERATIONS_KEY]}
    found: list[Leftover] = []
    if "" not in live:
        for name in root["variables"]:  # plain names (read_root checked them)
            array = store.join(name)
            if array.join("zarr.json").exists():
                found.append(Leftover.at(array, "the arrays of an evicted generation"))
    group = store.join(GROUP)
    numbers = {int(entry["generation"]) for entry in root[GENERATIONS_KEY]}
    for name in group.names():
        digits, _, suffix = name.partition(".")
        if not digits.isdigit() or (suffix and f".{suffix}" not in _SCRATCH):
            continue
        numbers.add(int(digits))
        path = f"{GROUP}/{name}"
        if not suffix and path not in live:
            found.append(Leftover.at(group.join(name), "a generation the store does not list"))
        elif suffix and not group.join(name).placed():
            found.append(Leftover.at(group.join(name), f"scratch of generation {int(digits)}'s shuffle"))
    gone = tuple(f"{left.location.path}/" for left in found)  # removed whole: not named again
    for path in _zarr_store.partials(store):
        if not store.join(path).path.startswith(gone):
            found.append(Leftover.at(store.join(path), "a file zarr was writing when a step was killed"))
    if tmp is not None:  # the pieces of a generation's shuffle given tmp=: named after the generation
        for number in sorted(numbers | {max(numbers) + 1}):
            pieces = store.join(generation_path(number) or GROUP).scratch(_leftovers.TMP_SUFFIX, tmp)
            if number and pieces.exists() and not pieces.placed():
                found.append(Leftover.at(pieces, f"pieces of generation {number}'s shuffle"))
    return found


def consolidated(store: Location, root: Mapping[str, Any]) -> bool:
    """Whether the root's consolidated metadata (what plain zarr and xarray open) lists the live generations, and
    only those: a kill between the root's two writes leaves it as it was."""
    group = open_group(store)
    inner = group.metadata.consolidated_metadata
    if inner is None:  # plain zarr reads the hierarchy as it is
        return True
    keys = set(inner.flattened_metadata)
    live = {entry["path"] for entry in root[GENERATIONS_KEY]}
    listed = {key for key in keys if _PATH.fullmatch(key)}
    first = all(name in keys for name in root["variables"])
    return listed == live - {""} and first == ("" in live)


def ensure_group(store: Location) -> None:
    """Create the ``generations`` group, so that zarr sees the generations as groups of the store."""
    path = store.join(GROUP)
    if not path.join("zarr.json").exists():
        open_group(path, mode="a")


def _newest_arrays(store: Location, root: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The group of the newest live generation, and its arrays of the root's variables (read_root checked them)."""
    location = generation_location(store, root[GENERATIONS_KEY][-1]["path"])
    group = open_group(location)
    return group, dict(zip(root["variables"], open_arrays(location, group, root["variables"]), strict=True))


def array_types(store: Location, root: Mapping[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The dtype and row shape of each variable, as the newest live generation stores them."""
    arrays = _newest_arrays(store, root)[1]
    return {name: (str(array.dtype), tuple(int(size) for size in array.shape[1:])) for name, array in arrays.items()}


def create_compacted(store: Location, number: int, metadata: Mapping[str, Any]) -> tuple[int, int]:
    """Create generation ``number`` empty, shaped like the newest live one, to hold every row of ``metadata``.

    Returns the row alignment its writes keep (the largest chunk rows, so that
    no two tasks write one chunk) and the bytes of a row.
    """
    like, arrays = _newest_arrays(store, metadata)
    recorded = metadata[GENERATIONS_KEY][-1].get("metadata")
    like_metadata: Any = recorded or _metadata.parse_metadata_attribute(like.attrs[_metadata.METADATA_KEY], store.url)
    path = generation_location(store, generation_path(number))
    own = {
        key: value for key, value in like_metadata.items() if key != GENERATIONS_KEY and key not in _metadata.BOUND_KEYS
    }
    own.update(
        run=_metadata.new_run(),
        complete=False,
        n_rows=metadata["n_rows"],
        pile_offsets=metadata["pile_offsets"],
        source=sources_of(metadata, "source", store.url),
        source_identity=sources_of(metadata, "source_identity", store.url),
    )
    group = open_group(path, mode="w", attributes={_metadata.METADATA_KEY: _metadata.metadata_attribute(own)})
    alignment, row_nbytes = 1, 0
    for name, array in arrays.items():
        group.create_array(
            name,
            shape=(int(metadata["n_rows"]), *array.shape[1:]),
            chunks=array.chunks,
            dtype=array.dtype,
            fill_value=array.fill_value,
            attributes=dict(array.attrs),
            dimension_names=array.metadata.dimension_names if hasattr(array.metadata, "dimension_names") else None,
            serializer=array.serializer or "auto",
            filters=array.filters,
            compressors=array.compressors,
            config={"write_empty_chunks": True},
        )
        alignment = max(alignment, int(array.chunks[0]))
        row_nbytes += array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
    return alignment, row_nbytes


def finish_compacted(store: Location, number: int) -> dict[str, Any]:
    """Mark generation ``number`` complete (with its own fingerprint) and return its entry."""
    location = generation_location(store, generation_path(number))
    recorded: Any = _metadata.parse_metadata_attribute(open_group(location).attrs[_metadata.METADATA_KEY], location.url)
    own = {key: value for key, value in recorded.items() if key != "fingerprint" and key not in _metadata.BOUND_KEYS}
    own.update(complete=True)
    own["fingerprint"] = fingerprint(own)
    # create_compacted drew the run
    own = _zarr_store.finish(location, {**own, _metadata.RUN_KEY: recorded.get(_metadata.RUN_KEY)})
    return entry_of(number, own, location.url)
