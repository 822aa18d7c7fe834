"""The kinds of data daskshuffle shuffles, behind one small interface.

Formats are internal; users call the public shuffles and the loader.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Sequence
from typing import Any

from .._errors import IncompletePileStoreError
from ..storage._location import Location
from ._base import FORMAT_VERSION, Format
from ._pile_metadata import AppendedStoreError, check_store_exists, parse_metadata_attribute
from ._pile_reader import ComposedReader, PileReader

__all__ = [
    "FORMAT_VERSION",
    "PILE_READERS",
    "ComposedReader",
    "Format",
    "PileReader",
    "open_pile_reader",
    "read_metadata",
]

#: The reader of each kind of pile store, as ``kind: "module:class"``, imported
#: only when needed so that reading Zarr does not load pyarrow, and so on.
#: Stores are recognised in this order.
PILE_READERS: dict[str, str] = {
    "zarr": "._zarr_reader:ZarrPileReader",
    "parquet": "._parquet_reader:ParquetPileReader",
}


def _reader_class(kind: str) -> type[PileReader[Any]]:
    module, name = PILE_READERS[kind].split(":")
    reader: type[PileReader[Any]] = getattr(importlib.import_module(module, __name__), name)
    return reader


def open_pile_reader(
    store: str | os.PathLike[str] | Location,
    variables: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    batch_format: str = "numpy",
) -> PileReader[Any]:
    """Open a complete pile store of any kind for reading.

    ``batch_format`` is what :meth:`PileReader.to_batch` hands out: ``"numpy"``
    (a dict of arrays, every kind), or ``"arrow"`` / ``"pandas"`` (Parquet stores).

    Raises ``SourceNotFoundError`` if ``store`` does not exist and
    ``IncompletePileStoreError`` if it is not a complete pile store of a
    known kind (each reader checks completeness, format version and variables).

    Examples
    --------
    >>> reader = open_pile_reader("piles.zarr")
    >>> reader.metadata["kind"], reader.n_rows
    ('zarr', 1000)
    >>> batch = reader.to_batch(reader.read_rows(0, 10))
    >>> sorted(batch), batch["x"].shape
    (['id', 'x', 'y'], (10, 8))
    >>> reader = open_pile_reader("piles.parquet", variables=["id", "label"], batch_format="pandas")
    >>> reader.to_batch(reader.read_rows(0, 3)).columns.tolist()
    ['id', 'label']
    """
    location = Location.of(store, storage_options)
    # Each look costs a request on object storage: whether the store exists is asked only when no kind is found.
    for kind in PILE_READERS:
        try:
            opened = _reader_class(kind).open_as_kind(location, variables, batch_format)
        except AppendedStoreError as appended:  # decided on the metadata read once: no race with an append
            from ._generations import GenerationsReader

            return GenerationsReader(location, variables, batch_format=batch_format, metadata=appended.metadata)
        if opened is not None:
            return opened
    check_store_exists(location, str(store))
    raise IncompletePileStoreError(
        f"Expected a pile store written by daskshuffle ({', '.join(PILE_READERS)}). Got {str(store)!r}, which is none of "
        "these, instead; pass the destination of a finished shuffle."
    )


#: Where each kind of pile store keeps the shuffle's metadata: a JSON file, and the key in it.
_METADATA_FILES = (("zarr.json", ("attributes", "daskshuffle")), ("_daskshuffle.json", ()))


def read_metadata(
    store: str | os.PathLike[str] | Location, storage_options: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The shuffle's metadata of ``store``, complete or not, or ``None`` if it has none (plain JSON, read as such).

    Examples
    --------
    >>> read_metadata("piles.zarr")["complete"], read_metadata("raw.zarr")
    (True, None)
    """
    location = Location.of(store, storage_options)
    fs, root = location.fs, location.path
    for name, keys in _METADATA_FILES:
        try:
            with fs.open(f"{root}/{name}", "r") as file:
                found: Any = json.load(file)
        except (FileNotFoundError, ValueError):
            continue
        for key in keys:
            found = found.get(key) if isinstance(found, dict) else None
        return parse_metadata_attribute(found)
    return None
