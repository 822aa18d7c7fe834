"""Reading pile stores fast: one reader per kind of store, each with its own fetch path.

:func:`open_pile_reader` opens a complete store of any kind; the loader and ``verify`` read through it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import IncompletePileStoreError
from .._faces import lazy_names
from ..pilestore import AppendedStoreError, check_store_exists
from ..storage import Location
from ._pile_reader import ComposedReader, PileReader, ReadCancelledError

_LAZY = {
    "._zarr_reader": ["ZarrPileReader"],
    "._parquet_reader": ["ParquetPileReader"],
    "._generations": ["GenerationsReader"],
}
if TYPE_CHECKING:
    from ._generations import GenerationsReader
    from ._parquet_reader import ParquetPileReader
    from ._zarr_reader import ZarrPileReader

__all__ = [
    "PILE_READERS",
    "ComposedReader",
    "GenerationsReader",
    "ParquetPileReader",
    "PileReader",
    "ReadCancelledError",
    "ZarrPileReader",
    "open_pile_reader",
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
    with location.reaching():  # no credentials, a misspelt option, throttling: named with the store's URL
        return _open_reader(location, str(store), variables, batch_format)


def _open_reader(location: Location, store: str, variables: Sequence[str] | None, batch_format: str) -> PileReader[Any]:
    # Each look costs a request on object storage: whether the store exists is asked only when no kind is found.
    for kind in PILE_READERS:
        try:
            opened = _reader_class(kind).open_as_kind(location, variables, batch_format)
        except AppendedStoreError as appended:  # decided on the metadata read once: no race with an append
            from ._generations import GenerationsReader

            return GenerationsReader(location, variables, batch_format=batch_format, metadata=appended.metadata)
        if opened is not None:
            return opened
    check_store_exists(location, store)
    raise IncompletePileStoreError(
        f"Expected a pile store written by daskshuffle ({', '.join(PILE_READERS)}). Got {store!r}, which is none of "
        "these, instead; pass the destination of a finished shuffle."
    )


if not TYPE_CHECKING:  # type checkers see the names imported above, and no catch-all
    __getattr__, __dir__ = lazy_names(__name__, _LAZY)
