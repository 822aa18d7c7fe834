"""Decoding a chunk of any codec pipeline with zarr itself, from bytes already read and checked.

A pipeline other than one blosc, zstd or gzip compressor is decoded by zarr: a
``MemoryStore`` holds a one-chunk array of the variable's metadata (its crc32c
left out, checked already) and the chunk's bytes, and zarr reads that array.
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import zarr

__all__ = ["ZarrDecode"]


class ZarrDecode:
    """Decodes the chunks of one array with its own codecs (its crc32c left out); picklable.

    Examples
    --------
    >>> import zarr
    >>> from zarr.codecs import GzipCodec, ZstdCodec
    >>> files = {}
    >>> store = zarr.storage.MemoryStore(files)
    >>> array = zarr.create_array(store, shape=(4,), chunks=(4,), dtype="i2", compressors=[ZstdCodec(), GzipCodec()])
    >>> array[...] = [1, 2, 3, 4]
    >>> encoded = files["c/0"].to_bytes()
    >>> ZarrDecode(array, "c/0").decode(encoded).view("i2").tolist()
    [1, 2, 3, 4]
    """

    def __init__(self, array: zarr.Array[Any], key: str) -> None:
        document: dict[str, Any] = dict(array.metadata.to_dict())
        document["shape"] = [int(size) for size in array.chunks]
        document["codecs"] = [codec for codec in document["codecs"] if codec["name"] != "crc32c"]
        document["attributes"] = {}
        self._document = json.dumps(document).encode()
        self._key = key

    def decode(self, data: Any) -> NDArray[np.uint8]:
        """The rows of a chunk as bytes, from the chunk file's bytes without their crc32c (or what zarr raises)."""
        import zarr
        from zarr.buffer.cpu import Buffer
        from zarr.storage import MemoryStore

        store = MemoryStore(
            {"zarr.json": Buffer.from_bytes(self._document), self._key: Buffer.from_bytes(memoryview(data))},
            read_only=True,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", zarr.errors.UnstableSpecificationWarning)  # fixed-length strings
            values = zarr.open_array(store, mode="r", zarr_format=3)[...]
        return np.ascontiguousarray(values).reshape(-1).view(np.uint8)
