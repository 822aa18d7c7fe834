"""A Zarr pile store that grows: generations of piles, read as one store.

A store that rows were appended to keeps each append as a *generation*: a
complete pile store of its own with the same number of piles, in the group
``generations/<n>`` of the store (generation 0, the first shuffle, stays at
the root). The root's metadata lists the live generations, and its
``pile_offsets`` and ``n_rows`` describe the store as the loader sees it:
pile ``p`` is pile ``p`` of every live generation, one after the other,
oldest first. The list is one JSON document written at once (zarr writes
``zarr.json`` to a temporary file and renames it; an object store replaces
an object whole), so a reader opens the old list or the new one, never half
of a change.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import zarr

from .._errors import DaskShuffleValueError, IncompletePileStoreError
from ..plan._plan import fingerprint
from ..storage._location import Location
from ._arrays import ArrayRows, ArrayRowsMethods
from ._arrays import concat_rows as _concat
from ._pile_metadata import (
    check_recorded_rows,
    check_store_exists,
    metadata_attribute,
    metadata_disagrees,
    parse_metadata_attribute,
)
from ._pile_reader import ComposedReader
from ._zarr_reader import ZarrPileReader
from ._zarr_reads import UnionRead
from ._zarr_source import METADATA_KEY

__all__ = ["GENERATIONS_KEY", "GenerationsReader", "generation_path", "read_root", "write_root"]

#: The key of the root metadata that lists the live generations.
GENERATIONS_KEY = "generations"
#: The group below the root that holds the generations after the first.
GROUP = "generations"


def generation_path(number: int) -> str:
    """Where generation ``number`` lives, relative to the store's root ("" for the first shuffle)."""
    return "" if number == 0 else f"{GROUP}/{number:05d}"


def _join(store: Location, relative: str) -> Location:
    return store if not relative else store.join(relative)


def _open_group(location: Location, **kwargs: Any) -> zarr.Group:
    """The Zarr group at ``location``: where generations hand a location to zarr."""
    return zarr.open_group(location.url, storage_options=location.zarr_options, **kwargs)


def read_root(store: Location, metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The root metadata of a complete Zarr pile store (read, or as given), its generations listed (one if never appended to)."""
    if metadata is None:
        from . import read_metadata

        check_store_exists(store, store.url)
        metadata = read_metadata(store)
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
    if GENERATIONS_KEY not in metadata:
        metadata = {**metadata, GENERATIONS_KEY: [_entry(0, metadata, base=metadata)]}
    else:  # the root of a store that rows were appended to (a store of one generation is checked when opened)
        check_recorded_rows(metadata, store.url, {})
    return dict(metadata)


def _entry(number: int, metadata: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the root records of a generation; the first shuffle's own metadata too, since the root's becomes the union."""
    entry = {
        "generation": number,
        "path": generation_path(number),
        "n_rows": int(metadata["n_rows"]),
        "pile_offsets": list(metadata["pile_offsets"]),
        "seed": int(metadata["seed"]),
        "fingerprint": metadata["fingerprint"],
        "source": metadata.get("source"),
    }
    if base is not None:
        entry["metadata"] = {key: value for key, value in base.items() if key != GENERATIONS_KEY}
    return entry


def entry_of(number: int, store: Location) -> dict[str, Any]:
    """The entry of generation ``number``, read from its own complete pile store."""
    reader = ZarrPileReader(_join(store, generation_path(number)))
    try:
        return _entry(number, reader.metadata)
    finally:
        reader.close()


def union(root: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The root metadata for the live generations ``entries``: pile ``p`` is pile ``p`` of each, oldest first."""
    sizes = sum(np.diff(np.asarray(entry["pile_offsets"], dtype=np.int64)) for entry in entries)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    metadata = {key: value for key, value in root.items() if key != "fingerprint"}
    metadata.update(
        n_rows=int(offsets[-1]),
        pile_offsets=offsets.tolist(),
        generations=[dict(entry) for entry in entries],
    )
    metadata["fingerprint"] = fingerprint(metadata)
    return metadata


def write_root(store: Location, metadata: Mapping[str, Any]) -> None:
    """Replace the root metadata in one write, then consolidate the store's metadata for plain zarr and xarray."""
    group = _open_group(store, mode="r+")
    group.attrs[METADATA_KEY] = metadata_attribute(metadata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        zarr.consolidate_metadata(group.store)


def sources_of(metadata: Mapping[str, Any]) -> list[str] | None:
    """The sources of every row of the store, oldest generation first; ``None`` if one was not files."""
    if GENERATIONS_KEY not in metadata:
        return metadata.get("source")
    found: list[str] = []
    for entry in metadata[GENERATIONS_KEY]:
        if not isinstance(entry.get("source"), list):
            return None
        found += entry["source"]
    return found


def remove_generation(store: Location, entry: Mapping[str, Any], variables: Sequence[str]) -> None:
    """Delete a generation's files: its group, or for the first shuffle its arrays at the root."""
    if entry["path"]:
        _join(store, entry["path"]).remove()
        return
    for name in variables:
        _join(store, name).remove()


def orphans(store: Location, live: Sequence[Mapping[str, Any]]) -> list[str]:
    """Generation groups below the root that the root does not list (an interrupted append or removal)."""
    group = _join(store, GROUP)
    fs, inner = group.fs, group.path
    if not fs.exists(inner):
        return []
    listed = {entry["path"].rsplit("/", 1)[-1] for entry in live}
    found = (path.rstrip("/").rsplit("/", 1)[-1] for path in fs.ls(inner, detail=False))
    return sorted(f"{GROUP}/{name}" for name in found if name.isdigit() and name not in listed)


def ensure_group(store: Location) -> None:
    """Create the ``generations`` group, so that zarr sees the generations as groups of the store."""
    path = _join(store, GROUP)
    if not path.join("zarr.json").exists():
        _open_group(path, mode="a", zarr_format=3)


# -- reading -----------------------------------------------------------------------
class GenerationsReader(ArrayRowsMethods, ComposedReader[ArrayRows]):
    """A Zarr pile store with several generations, read as one: pile ``p`` is pile ``p`` of each, oldest first.

    Examples
    --------
    >>> import daskshuffle
    >>> _ = daskshuffle.shuffle_zarr("raw.zarr", "grown.zarr", n_piles=4, seed=0)
    >>> _ = daskshuffle.append("grown.zarr", "raw.zarr", seed=1)
    >>> reader = GenerationsReader("grown.zarr")
    >>> reader.n_rows, len(reader.generations)
    (2000, 2)
    """

    kind, batch_formats = ZarrPileReader.kind, ZarrPileReader.batch_formats  # as its generations' readers

    def _open(
        self, location: Location, variables: Sequence[str] | None, *, metadata: Mapping[str, Any] | None = None
    ) -> None:
        self.metadata = read_root(location, metadata)
        self.generations: list[ZarrPileReader] = []
        for entry in self.metadata[GENERATIONS_KEY]:
            self.generations.append(
                ZarrPileReader(
                    _join(location, entry["path"]),
                    variables,
                    batch_format=self.batch_format,
                    metadata=entry.get("metadata"),
                )
            )
        self._check_generations()
        self._offsets = np.asarray([reader.pile_offsets for reader in self.generations], dtype=np.int64)
        self._union = self.pile_offsets
        self._largest_pile = int(np.diff(self._union).max()) if len(self._union) > 1 else 0
        first = self.generations[0].arrays
        self._types = {name: (array.dtype, tuple(array.shape[1:])) for name, array in first.items()}
        self._lock = threading.Lock()
        self._spare: list[ArrayRows] = []

    def _check_generations(self) -> None:
        """Refuse a root whose list of generations disagrees with the generations' own metadata or its offsets."""
        for entry, reader in zip(self.metadata[GENERATIONS_KEY], self.generations, strict=True):
            for key in ("n_rows", "fingerprint"):
                if entry.get(key) != reader.metadata.get(key):
                    raise metadata_disagrees(
                        self.store,
                        f"the {key} it lists for generation {entry.get('generation')} to be the generation's own",
                        f"{key} = {entry.get(key)!r} listed and {reader.metadata.get(key)!r} in {reader.store!r}",
                    )
        sizes = [np.diff(reader.pile_offsets) for reader in self.generations]
        if any(len(size) != len(sizes[0]) for size in sizes):
            raise metadata_disagrees(
                self.store,
                "generations of one number of piles",
                f"n_piles = {', '.join(str(len(size)) for size in sizes)} in its generations",
            )
        summed = np.concatenate([[0], np.cumsum(sum(sizes))]).astype(np.int64)
        offsets = self.pile_offsets
        differ = (
            np.flatnonzero(offsets != summed)
            if len(offsets) == len(summed)
            else np.array([min(len(offsets), len(summed)) - 1])
        )
        if differ.size:
            at = int(differ[0])
            raise metadata_disagrees(
                self.store,
                "pile_offsets that add up its generations' piles",
                f"pile_offsets[{at}] = {int(offsets[at]):,} and {int(summed[at]):,} from its generations",
            )

    @property
    def members(self) -> list[ZarrPileReader]:
        return self.generations

    def read_pile(self, pile: int) -> ArrayRows:
        return self.start_pile(pile).result()

    def start_pile(self, pile: int) -> UnionRead:
        """The read of ``pile``: each generation that holds rows of it reads them into its slice of one set of arrays."""
        sizes = self._offsets[:, pile + 1] - self._offsets[:, pile]
        rows = self._empty(int(sizes.sum()))
        reads, first = [], 0
        for reader, size in zip(self.generations, sizes.tolist(), strict=True):
            if size > 0:
                reads.append(
                    reader.start_pile(pile, {name: values[first : first + size] for name, values in rows.items()})
                )
                first += size
        return UnionRead(rows, reads)

    def _empty(self, n_rows: int) -> ArrayRows:
        """Arrays for ``n_rows`` rows: recycled ones (:meth:`recycle`) if large enough, else of the largest pile."""
        with self._lock:
            if self._spare and len(next(iter(self._spare[0].values()))) >= n_rows:
                return {name: values[:n_rows] for name, values in self._spare.pop(0).items()}
        capacity = max(n_rows, self._largest_pile)
        return {
            name: np.empty((capacity, *shape), dtype=dtype)[:n_rows] for name, (dtype, shape) in self._types.items()
        }

    def recycle(self, rows: ArrayRows) -> None:
        """Take back a pile's arrays that nothing uses any more (at most two piles' worth), to read other piles into."""
        whole = {name: values.base for name, values in rows.items()}
        if all(isinstance(base, np.ndarray) for base in whole.values()) and set(whole) == set(self._types):
            with self._lock:
                if len(self._spare) < 2:
                    self._spare.append(whole)  # type: ignore[arg-type]

    @staticmethod
    def _concat_parts(parts: list[ArrayRows]) -> ArrayRows:
        return parts[0] if len(parts) == 1 else _concat(parts)

    def read_rows(self, start: int, stop: int) -> ArrayRows:
        stop = max(start, min(stop, self.n_rows))
        parts: list[ArrayRows] = []
        first = int(np.searchsorted(self._union, start, side="right")) - 1
        for pile in range(max(first, 0), len(self._union) - 1):
            begin = int(self._union[pile])
            if begin >= stop:
                break
            # Rows a:b of the union pile, taken from each generation's pile in turn.
            a, b = max(start, begin) - begin, min(stop, int(self._union[pile + 1])) - begin
            for reader, offsets in zip(self.generations, self._offsets, strict=True):
                size = int(offsets[pile + 1] - offsets[pile])
                if a < size and b > 0:
                    base = int(offsets[pile])
                    parts.append(reader.read_rows(base + max(a, 0), base + min(b, size)))
                a, b = a - size, b - size
        return self._concat_parts(parts) if parts else self.generations[0].read_rows(0, 0)

    def __getstate__(self) -> dict[str, Any]:  # pickled into torch DataLoader workers
        return {**self.__dict__, "_lock": None, "_spare": []}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._spare = []
        super().close()


def array_types(store: Location, root: Mapping[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The dtype and row shape of each variable, as the newest live generation stores them."""
    newest = root[GENERATIONS_KEY][-1]
    group = _open_group(_join(store, newest["path"]), mode="r")
    types = {}
    for name in root["variables"]:
        array = group[name]
        assert isinstance(array, zarr.Array)
        types[name] = (str(array.dtype), tuple(int(size) for size in array.shape[1:]))
    return types


# -- compacting ----------------------------------------------------------------------
def create_compacted(store: Location, number: int, metadata: Mapping[str, Any]) -> tuple[int, int]:
    """Create generation ``number`` empty, shaped like the newest live one, to hold every row of ``metadata``.

    Returns the row alignment its writes keep (the largest chunk rows, so that
    no two tasks write one chunk) and the bytes of a row.
    """
    newest = metadata[GENERATIONS_KEY][-1]
    like = _open_group(_join(store, newest["path"]), mode="r")
    like_metadata: Any = newest.get("metadata") or parse_metadata_attribute(like.attrs[METADATA_KEY])
    path = _join(store, generation_path(number))
    own = {key: value for key, value in like_metadata.items() if key != GENERATIONS_KEY}
    own.update(
        complete=False,
        n_rows=metadata["n_rows"],
        pile_offsets=metadata["pile_offsets"],
        source=sources_of(metadata),
    )
    group = _open_group(path, mode="w", zarr_format=3, attributes={METADATA_KEY: metadata_attribute(own)})
    alignment, row_nbytes = 1, 0
    for name in metadata["variables"]:
        array = like[name]
        assert isinstance(array, zarr.Array)
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


def copy_rows(store: Location, number: int, start: int, stop: int) -> int:
    """Rows ``start:stop`` of the store as its root lists them now, written into generation ``number``."""
    reader = GenerationsReader(store)
    try:
        rows = reader.read_rows(start, stop)
    finally:
        reader.close()
    group = _open_group(_join(store, generation_path(number)), mode="r+")
    for name, values in rows.items():
        array = group[name]
        assert isinstance(array, zarr.Array)
        array[start:stop] = values
    return stop - start


def finish_compacted(store: Location, number: int) -> dict[str, Any]:
    """Mark generation ``number`` complete (with its own fingerprint) and return its entry."""
    group = _open_group(_join(store, generation_path(number)), mode="r+")
    recorded: Any = parse_metadata_attribute(group.attrs[METADATA_KEY])
    own = {key: value for key, value in recorded.items() if key != "fingerprint"}
    own.update(complete=True)
    own["fingerprint"] = fingerprint(own)
    group.attrs[METADATA_KEY] = metadata_attribute(own)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        zarr.consolidate_metadata(group.store)
    return _entry(number, own)
