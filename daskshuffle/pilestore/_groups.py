"""Opening the Zarr groups and arrays of a pile store, every request within the deadline of its storage options."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..storage import Location, request_deadline
from ._metadata import METADATA_KEY, parse_metadata_attribute

if TYPE_CHECKING:
    import zarr

    from ._recording import BoundedStore

__all__ = [
    "bounded_node",
    "consolidate_group",
    "find_group",
    "group_metadata",
    "open_arrays",
    "open_group",
    "unbounded",
    "zarr_store",
]

T = TypeVar("T")


def zarr_store(location: Location, *, read_only: bool = False) -> BoundedStore:
    """The zarr store of ``location``, each of whose requests fails within the deadline of its storage options.

    Examples
    --------
    >>> zarr_store(Location.of("piles.zarr"), read_only=True).deadline
    30.0
    """
    import zarr.storage

    from ._recording import BoundedStore

    inner: Any
    if location.is_local:
        inner = zarr.storage.LocalStore(location.path, read_only=read_only)
    else:
        inner = zarr.storage.FsspecStore.from_url(location.url, storage_options=location.options, read_only=read_only)
    return BoundedStore(inner, request_deadline(location.options))


def unbounded(store: Any) -> Any:
    """The store that :func:`zarr_store` bounds the requests of (any other store, itself): what messages name."""
    from ._recording import BoundedStore

    return store.inner if isinstance(store, BoundedStore) else store


def bounded_node(node: zarr.Group | zarr.Array[Any]) -> zarr.Group | zarr.Array[Any]:
    """``node``, a group or array a user opened on a store of files, opened again at its path, read-only, through
    a store each of whose requests fails within the deadline of that store's filesystem options.

    The user's node is left as it is. A store of files is zarr's
    ``FsspecStore`` or ``LocalStore``; a node of any other store (a
    ``MemoryStore``) is returned as it is. :func:`unbounded` of the new node's
    store is a read-only copy of the user's: messages and identities name it.
    Opening reads the node's metadata again, each request within the deadline.

    Examples
    --------
    >>> import zarr
    >>> group = zarr.open_group("raw.zarr", mode="r")
    >>> bounded = bounded_node(group)
    >>> bounded.store.deadline, unbounded(bounded.store).root == group.store.root
    (30.0, True)
    """
    import zarr.storage

    from ._recording import BoundedStore

    store = node.store
    if not isinstance(store, zarr.storage.FsspecStore | zarr.storage.LocalStore):
        return node
    options = getattr(getattr(store, "fs", None), "storage_options", None)  # the user's filesystem's: its timeouts
    bounded = BoundedStore(store.with_read_only(True), request_deadline(options))
    where: dict[str, Any] = {"store": bounded, "path": node.path, "mode": "r", "zarr_format": node.metadata.zarr_format}
    if isinstance(node, zarr.Array):
        return zarr.open_array(**where)
    # The metadata the user's group was opened with: its consolidated metadata only if it used them.
    return zarr.open_group(**where, use_consolidated=node.metadata.consolidated_metadata is not None)


def open_group(location: Location, mode: str = "r", **kwargs: Any) -> zarr.Group:
    """``zarr.open_group`` of the Zarr v3 group at ``location`` in ``mode`` (``kwargs`` as zarr takes them), within the deadline.

    Examples
    --------
    >>> open_group(Location.of("piles.zarr")).attrs["daskshuffle"]["kind"]
    'zarr'
    """
    import zarr
    from zarr.api.asynchronous import open_group as opening

    store = zarr_store(location, read_only=mode == "r")
    request = opening(store=store, mode=mode, zarr_format=3, **kwargs)  # type: ignore[arg-type]
    return zarr.Group(_bounded(location, request))


def find_group(location: Location) -> zarr.Group | None:
    """The Zarr v3 group at ``location``, or ``None`` if it has none (no ``zarr.json``): one request on object storage.

    Not the consolidated metadata: each array's shape as its own zarr.json
    records it, to check the rows. Pile stores are Zarr v3: no look for v2's
    metadata files (each look is a request on object storage).
    """
    try:
        return open_group(location, "r", use_consolidated=False)
    except FileNotFoundError:  # zarr's GroupNotFoundError, or a local directory that does not exist
        return None


def group_metadata(location: Location) -> dict[str, Any] | None:
    """The daskshuffle metadata of the Zarr group at ``location``, or ``None`` if it is no group or records none.

    A refused, throttled or stalled request raises
    :class:`~daskshuffle.StorageAccessError`: it is not a missing group.
    """
    import zarr

    try:
        group = find_group(location)
    except (ValueError, zarr.errors.BaseZarrError):  # a zarr.json that zarr cannot read: no group of a pile store
        return None
    return None if group is None else parse_metadata_attribute(group.attrs.get(METADATA_KEY), location.url)


def consolidate_group(location: Location, group: zarr.Group) -> None:
    """Consolidate the metadata of ``group`` (at ``location``) for plain zarr and xarray, every request within the deadline."""
    import zarr
    from zarr.api.asynchronous import consolidate_metadata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        _bounded(location, consolidate_metadata(group.store))


def _bounded(location: Location, request: Coroutine[Any, Any, T]) -> T:
    """``request`` (of a group opened through :func:`zarr_store`) run on zarr's event loop (``zarr.core.sync.sync``).

    A refused, throttled or stalled request raises
    :class:`~daskshuffle.StorageAccessError` naming ``location``. An error
    leaves without the loop's frames: they hold it in cycles (``sync`` and
    ``asyncio.wait_for`` keep it), which would keep a caller's frames, a
    loader's threads among them, alive until the cycle collector runs.
    """
    from zarr.core.sync import sync

    with location.reaching("zarr.json"):
        try:
            return sync(request)
        except BaseException as error:
            raise error.with_traceback(None)  # noqa: B904 (the same error again: its cause and context stay)


def open_arrays(location: Location, group: zarr.Group, names: Sequence[str]) -> list[Any]:
    """``group.get(name)`` for each of ``names``, all at once (each a request on object storage), within the deadline."""
    import zarr

    async_group = group._async_group  # zarr.Group wraps it (its one field): the members are opened on zarr's loop

    async def members() -> list[Any]:  # each array's zarr.json at once, each request within the deadline
        return await asyncio.gather(*(async_group.get(name) for name in names))

    found = _bounded(location, members())
    return [
        zarr.Array(node) if isinstance(node, zarr.AsyncArray) else zarr.Group(node) if node is not None else None
        for node in found
    ]
