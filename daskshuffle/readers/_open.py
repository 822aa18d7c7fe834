"""Opening a complete pile store of any kind: the reader of its kind, found without a request per guess."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .._errors import IncompletePileStoreError
from ..pilestore import GENERATIONS_KEY, METADATA_FILE, check_store_exists
from ..storage import Location
from ._generations import GenerationsReader
from ._pile_reader import PileReader
from ._zarr_open import find_store
from ._zarr_reader import ZarrPileReader

__all__ = ["open_pile_reader"]


def open_pile_reader(
    store: str | os.PathLike[str] | Location,
    variables: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    batch_format: str = "numpy",
) -> PileReader[Any]:
    """Open a complete pile store of any kind for reading.

    ``batch_format`` is what ``reader.rows.to_batch`` hands out: ``"numpy"``
    (every kind), ``"xarray"`` (Zarr), ``"arrow"`` or ``"pandas"`` (Parquet).
    Raises ``SourceNotFoundError`` if ``store`` does not exist and
    ``IncompletePileStoreError`` if it is not a complete pile store.

    Examples
    --------
    >>> reader = open_pile_reader("piles.zarr")
    >>> reader.metadata["kind"], reader.n_rows
    ('zarr', 1000)
    >>> batch = reader.rows.to_batch(reader.read_rows(0, 10))
    >>> sorted(batch), batch["x"].shape
    (['id', 'x', 'y'], (10, 8))
    >>> reader = open_pile_reader("piles.parquet", variables=["id", "label"], batch_format="pandas")
    >>> reader.rows.to_batch(reader.read_rows(0, 3)).columns.tolist()
    ['id', 'label']
    """
    location = Location.of(store, storage_options)
    with location.reaching():  # no credentials, a misspelt option, throttling: named with the store's URL
        # Each look is a request on object storage: the Zarr group's metadata, read once, says if generations were
        # appended; whether the store exists is asked only when no kind is found.
        found = find_store(location)
        if found is not None:
            group, metadata = found
            if isinstance(metadata, dict) and GENERATIONS_KEY in metadata:  # rows were appended to it
                return GenerationsReader(location, variables, batch_format=batch_format, metadata=metadata)
            return ZarrPileReader(location, variables, batch_format=batch_format, group=group)
        from ._parquet_reader import ParquetPileReader  # pyarrow: loaded only once a store is not Zarr

        if location.join(METADATA_FILE).exists():  # a cheap look; opening it checks the rest
            return ParquetPileReader(location, variables, batch_format=batch_format)
        check_store_exists(location, str(store))
        raise IncompletePileStoreError(
            f"Expected a pile store written by daskshuffle (zarr, parquet). Got {str(store)!r}, which is none of "
            "these, instead; pass the destination of a finished shuffle."
        )
