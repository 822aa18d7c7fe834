"""Byte ranges of a Parquet part file, fetched from object storage and read by pyarrow as the file.

A read of a remote Parquet pile store requests the byte ranges of the column
chunks it needs (:class:`~daskshuffle.storage._fetch.Fetches`) and hands them
to pyarrow as one file (:class:`FetchedFile`), which decodes the row groups
from them without another request.
"""

from __future__ import annotations

import bisect
from concurrent.futures import Future

__all__ = ["Fetched", "FetchedFile", "Range", "bytes_of"]

#: A part file's path and the first and end byte of a range of it.
Range = tuple[str, int, int]
#: A byte range and its fetch.
Fetched = tuple[Range, Future[bytes]]


class FetchedFile:
    """Byte ranges of a part file, fetched, read as the file by ``pyarrow.PythonFile`` (no copy within a range).

    Its size is the end of the last range: pyarrow reads a row group's column
    chunks, from the footer it is given, and nothing else. A read of bytes not
    fetched raises ``OSError``.
    """

    closed = False

    def __init__(self, ranges: list[tuple[int, bytes]]) -> None:
        self._ranges = sorted(ranges, key=lambda found: found[0])
        self._starts = [start for start, _ in self._ranges]
        self._size = max((start + len(data) for start, data in self._ranges), default=0)
        self._position = 0

    def seek(self, position: int, whence: int = 0) -> int:
        self._position = position + (0, self._position, self._size)[whence]
        return self._position

    def tell(self) -> int:
        return self._position

    def read_buffer(self, nbytes: int) -> memoryview | bytes:
        start = self._position
        stop = min(start + nbytes, self._size)
        parts: list[memoryview] = []
        index = bisect.bisect_right(self._starts, start) - 1
        position = start
        while position < stop:
            if index < 0 or index >= len(self._ranges):
                raise OSError(f"bytes {position}:{stop} of the part file were not fetched")
            first, data = self._ranges[index]
            if not first <= position < first + len(data):
                raise OSError(f"bytes {position}:{stop} of the part file were not fetched")
            end = min(stop, first + len(data))
            parts.append(memoryview(data)[position - first : end - first])
            position, index = end, index + 1
        self._position = stop
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self, nbytes: int = -1) -> bytes:
        return bytes(self.read_buffer(self._size - self._position if nbytes < 0 else nbytes))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def bytes_of(fetched: Fetched) -> tuple[int, bytes]:
    """Where a fetched range starts, and its bytes (all of them: a short read raises ``OSError``)."""
    (_, first, end), future = fetched
    data = future.result()
    if len(data) != end - first:
        raise OSError(f"{len(data):,} bytes at {first:,} instead of {end - first:,}")
    return first, data
