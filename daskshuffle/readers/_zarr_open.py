"""Opening a Zarr pile store: its group, its metadata and its arrays, checked before anything is read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import IncompletePileStoreError, StorageAccessError
from ..pilestore import (
    GENERATIONS_KEY,
    METADATA_KEY,
    AppendedStoreError,
    check_pile_metadata,
    check_store_exists,
    check_variable_names,
    find_group,
    metadata_disagrees,
    parse_metadata_attribute,
)
from ..storage import Location

if TYPE_CHECKING:
    import zarr

__all__ = ["check_shapes", "find_store", "open_store"]


def find_store(location: Location) -> tuple[zarr.Group | None, Any] | None:
    """The Zarr group at ``location`` and its metadata, read once, or ``None`` without ``zarr.json``.

    A ``zarr.json`` that cannot be read gives ``(None, None)``: :func:`open_store` names the problem.
    """
    import zarr

    try:
        group = find_group(location)
    except (PermissionError, ValueError, zarr.errors.BaseZarrError):
        return None, None
    return None if group is None else (group, parse_metadata_attribute(group.attrs.get(METADATA_KEY)))


def open_store(
    location: Location, given: str, metadata: Mapping[str, Any] | None, group: zarr.Group | None
) -> tuple[zarr.Group, dict[str, Any]]:
    """The group of the Zarr pile store at ``location`` (``group`` if given) and its metadata (``metadata`` if given), checked.

    Refuses a store that does not exist, is not a Zarr group, has no
    daskshuffle metadata or several generations, or fails
    :func:`~daskshuffle.pilestore.check_pile_metadata`.
    """
    import zarr

    problem = "no zarr.json"
    if group is None:
        try:
            with location.reaching("zarr.json"):  # a refused or throttled request is not a missing group
                group = find_group(location)
        except StorageAccessError:
            raise
        except (PermissionError, ValueError, zarr.errors.BaseZarrError) as error:
            problem = str(error)
    if group is None:
        check_store_exists(location, given)  # asked only now (a request on object storage); names refused credentials
        raise IncompletePileStoreError(
            f"Expected a Zarr pile store. Got {given!r}, which is not a Zarr group ({problem}), instead."
        )
    found = parse_metadata_attribute(group.attrs.get(METADATA_KEY)) if metadata is None else dict(metadata)
    if not isinstance(found, dict):
        raise IncompletePileStoreError(
            f"Expected a pile store written by daskshuffle. Got {given!r}, which has no daskshuffle metadata, instead."
        )
    if GENERATIONS_KEY in found:
        raise AppendedStoreError(
            f"Expected a pile store of one generation. Got {given!r}, which rows were appended to, instead; "
            "open it with daskshuffle.readers.open_pile_reader (or PileLoader), which reads every generation."
        )
    check_pile_metadata(found, given)
    check_variable_names(found, given)
    return group, found


def check_shapes(store: str, arrays: Mapping[str, zarr.Array[Any]], written: Mapping[str, Any]) -> None:
    """Refuse arrays that are not as the shuffle wrote them (a reshaped one makes every chunk file's name wrong)."""
    for name, array in arrays.items():
        recorded = written.get(name) if isinstance(written, Mapping) else None
        if not isinstance(recorded, Mapping) or "row_shape" not in recorded or "chunk_rows" not in recorded:
            raise metadata_disagrees(
                store, f"the layout of array {name!r} (its rows per chunk and row shape)", f"{recorded!r}"[:200]
            )
        expected_rows = recorded["row_shape"]
        expected_chunks = [recorded["chunk_rows"], *expected_rows]
        if [*array.shape[1:]] != list(expected_rows) or [*array.chunks] != expected_chunks:
            raise metadata_disagrees(
                store,
                f"array {name!r} in chunks of whole rows, as the shuffle wrote it (rows of shape "
                f"{tuple(expected_rows)}, chunks of {tuple(expected_chunks)})",
                f"shape {array.shape} in chunks of {array.chunks}",
            )
