"""Opening the Zarr groups and arrays of a pile store, every request within the deadline of its storage options.

The one way a pile store's Zarr metadata is opened, to read or to write: a
store with one generation or several, its root, its generations, and a
generation being written. Each opening is zarr's own (its asynchronous API)
run on zarr's event loop :func:`~daskshuffle.storage.within`
:func:`~daskshuffle.storage.request_deadline`: a ``zarr.json`` that stalls
fails as unreachable within it, not after the retries of s3fs and botocore.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..storage import Location, request_deadline, within
from ._metadata import METADATA_KEY, parse_metadata_attribute

if TYPE_CHECKING:
    import zarr

__all__ = ["consolidate_group", "find_group", "group_metadata", "open_arrays", "open_group"]

T = TypeVar("T")


def open_group(location: Location, mode: str = "r", **kwargs: Any) -> zarr.Group:
    """``zarr.open_group`` of the Zarr v3 group at ``location`` in ``mode`` (``kwargs`` as zarr takes them), within the deadline.

    Examples
    --------
    >>> open_group(Location.of("piles.zarr")).attrs["daskshuffle"]["kind"]
    'zarr'
    """
    import zarr
    from zarr.api.asynchronous import open_group as opening
    from zarr.storage import FsspecStore

    if location.is_local:
        store: Any = location.url
    else:
        store = FsspecStore.from_url(location.url, storage_options=location.options, read_only=mode == "r")
    request = opening(store=store, mode=mode, zarr_format=3, **kwargs)  # type: ignore[arg-type]
    return zarr.Group(_bounded(location, getattr(store, "fs", None), request, "zarr.json"))


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
        _bounded(location, getattr(group.store, "fs", None), consolidate_metadata(group.store), "zarr.json")


def _bounded(location: Location, fs: Any, request: Coroutine[Any, Any, T], what: str) -> T:
    """``request`` run on zarr's event loop, failing within the deadline of ``location``'s options: a refused,
    throttled or stalled request as :class:`~daskshuffle.StorageAccessError` naming ``location``."""
    with location.reaching(what):
        return _on_zarr_loop(within(fs, request, request_deadline(location.options), what))


def open_arrays(location: Location, group: zarr.Group, names: Sequence[str]) -> list[Any]:
    """``group.get(name)`` for each of ``names``, all at once (each a request on object storage), within the deadline."""
    import zarr

    async_group = group._async_group  # zarr.Group wraps it (its one field): the members are opened on zarr's loop

    fs, deadline = getattr(group.store, "fs", None), request_deadline(location.options)

    async def members() -> list[Any]:  # each array's zarr.json within the deadline on its own
        return await asyncio.gather(
            *(within(fs, async_group.get(name), deadline, f"{name}/zarr.json") for name in names)
        )

    with location.reaching("zarr.json"):
        found = _on_zarr_loop(members())
    return [
        zarr.Array(node) if isinstance(node, zarr.AsyncArray) else zarr.Group(node) if node is not None else None
        for node in found
    ]


def _on_zarr_loop(request: Coroutine[Any, Any, T]) -> T:
    """``request`` run on zarr's event loop (``zarr.core.sync.sync``); an error raised from here, without the loop's frames.

    Those frames hold the error in cycles: ``sync`` keeps it in a local, and
    ``asyncio.wait_for`` (under the deadline) keeps the future that holds it.
    A caller that catches the error (a store with no group) would otherwise
    leave every frame up its stack, a loader being opened and its threads
    among them, alive until the cycle collector runs. The error's message
    and cause stay; the traceback starts here.
    """
    from zarr.core.sync import sync

    try:
        return sync(request)
    except BaseException as error:
        raise error.with_traceback(None)  # noqa: B904 (the same error again: its cause and context stay)
