"""The zarr stores a pile store is opened through: zarr classes, so imported only where zarr is."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

import zarr.storage
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from ..storage import within

__all__ = ["BoundedStore", "RecordingStore"]

T = TypeVar("T")


class BoundedStore(zarr.storage.WrapperStore[Store]):
    """A zarr store each of whose requests (a read, a write, a delete) fails within ``deadline`` seconds.

    Each request on its own, :func:`~daskshuffle.storage.within` the deadline,
    as zarr makes them: the chunks of one write still go out together, and a
    stalled PUT of one fails as a stalled read does. Listings pass as they are.

    Examples
    --------
    >>> import zarr
    >>> store = BoundedStore(zarr.storage.MemoryStore(), deadline=30.0)
    >>> zarr.create_array(store, shape=(4,), dtype="i2")[...].tolist()
    [0, 0, 0, 0]
    """

    def __init__(self, store: Store, deadline: float) -> None:
        super().__init__(store)
        #: The store whose requests are bounded: what a message or an identity names.
        self.inner = store
        self.deadline = deadline

    def _with_store(self, store: Store) -> BoundedStore:
        return type(self)(store, self.deadline)

    def _within(self, request: Awaitable[T], key: str) -> Awaitable[T]:
        return within(getattr(self._store, "fs", None), request, self.deadline, key)

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        return await self._within(self._store.get(key, prototype, byte_range), key)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        what = key_ranges[0][0] if key_ranges else ""
        return await self._within(self._store.get_partial_values(prototype, key_ranges), what)

    async def exists(self, key: str) -> bool:
        return await self._within(self._store.exists(key), key)

    async def set(self, key: str, value: Buffer) -> None:
        await self._within(self._store.set(key, value), key)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await self._within(self._store.set_if_not_exists(key, value), key)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        await asyncio.gather(*(self.set(key, value) for key, value in values))

    async def delete(self, key: str) -> None:
        await self._within(self._store.delete(key), key)

    async def delete_dir(self, prefix: str) -> None:
        await self._within(self._store.delete_dir(prefix), prefix)


class RecordingStore(zarr.storage.WrapperStore[Store]):
    """A zarr store that records the crc32c each chunk file it writes ends with, by key."""

    def __init__(self, store: Store, recorded: dict[str, int] | None = None) -> None:
        super().__init__(store)
        self.recorded: dict[str, int] = {} if recorded is None else recorded

    def _with_store(self, store: Store) -> RecordingStore:
        return type(self)(store, self.recorded)

    async def set(self, key: str, value: Buffer) -> None:
        tail = value.as_numpy_array()[-4:]
        if not key.endswith("zarr.json") and len(tail) == 4:
            self.recorded[key] = int.from_bytes(tail.tobytes(), "little")
        await self._store.set(key, value)
