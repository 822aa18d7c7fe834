"""The zarr store that records each chunk's crc32c as it is written: a zarr class, so imported only where zarr is."""

from __future__ import annotations

import zarr.storage
from zarr.abc.store import Store
from zarr.core.buffer import Buffer

__all__ = ["RecordingStore"]


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
