"""Byte ranges of a Parquet file, fetched from object storage at once and read by pyarrow as the file
(:class:`FetchedFile`): the row groups decode from them without another request.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from .._threads import each
from ..storage import bounded, fetched_each

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = [
    "FOOTER_NBYTES",
    "Fetched",
    "FetchedFile",
    "NotFetchedError",
    "Range",
    "bytes_of",
    "coalesce",
    "column_chunk_bytes",
    "fetch_spans",
    "footer_tail",
    "read_footer",
    "with_footer_tails",
]

T = TypeVar("T")

#: A part file's path and the first and end byte of a range of it.
Range = tuple[str, int, int]
#: A byte range and its fetch.
Fetched = tuple[Range, Future[bytes]]
#: Bytes at the end of a Parquet file requested for its footer: what pyarrow reads first (its default footer read
#: size). A larger footer costs a second request.
FOOTER_NBYTES = 64 * 2**10


class NotFetchedError(OSError):
    """A read of bytes of a :class:`FetchedFile` that were not fetched."""


def column_chunk_bytes(column: pq.ColumnChunkMetaData) -> tuple[int, int]:
    """Where pyarrow reads a column chunk: from its dictionary page, if it has one, else its first data page."""
    first = column.data_page_offset
    if column.has_dictionary_page and 0 < (column.dictionary_page_offset or 0) < first:
        first = column.dictionary_page_offset
    return first, first + column.total_compressed_size


def footer_tail(size: int, metadata: pq.FileMetaData) -> tuple[int, int]:
    """The bytes at the end of a file of ``size`` bytes that pyarrow reads for its footer ``metadata``."""
    return max(0, size - max(FOOTER_NBYTES, metadata.serialized_size + 8)), size


def read_footer(fs: Any, path: str, size: int, tail: tuple[int, bytes] | None = None) -> pq.FileMetaData:
    """The footer of the Parquet file ``path`` of ``size`` bytes: from its last bytes, one request (two if large).

    ``tail`` is the file's last bytes and where they start, if already
    fetched. A file that is not Parquet raises pyarrow's error.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    first, data = tail if tail is not None else (max(0, size - FOOTER_NBYTES), b"")
    if tail is None:
        data = bounded(fs, "cat_file", path, start=first, end=size, what=path)
    if len(data) >= 8 and data[-4:] == b"PAR1":
        needed = int.from_bytes(data[-8:-4], "little") + 8  # the footer, its length and the magic
        if len(data) < needed <= size:
            first = size - needed
            data = bounded(fs, "cat_file", path, start=first, end=size, what=path)
    with pa.PythonFile(FetchedFile([(first, data)]), mode="r") as handle:
        return pq.ParquetFile(handle).metadata


def with_footer_tails(
    fs: Any | None,
    files: Sequence[tuple[str, int]],
    parse: Callable[[int, tuple[int, bytes] | None], T],
    at_once: int,
    threads: int,
) -> list[T]:
    """``parse(index, tail)`` of each of ``files`` (path, size), in order, by ``threads`` threads.

    ``tail`` is the file's last :data:`FOOTER_NBYTES` and where they start, for
    :func:`read_footer`, requested ``at_once`` files at a time from ``fs``;
    ``None`` without ``fs`` (a local file), or where the request failed: the
    footer's read asks again, and raises its error.
    """
    parsed: list[T] = []
    for first in range(0, len(files), at_once):
        batch = files[first : first + at_once]
        starts = [max(0, size - FOOTER_NBYTES) for _, size in batch]
        requests = [(path, start, size) for (path, size), start in zip(batch, starts, strict=True)]
        fetched = [None] * len(batch) if fs is None else fetched_each(fs, requests)
        tails = [
            (start, data) if isinstance(data, bytes) else None for start, data in zip(starts, fetched, strict=True)
        ]
        parsed += each(lambda job: parse(*job), enumerate(tails, start=first), threads)
    return parsed


def coalesce(ranges: Iterable[tuple[int, int]], gap: int) -> tuple[tuple[int, int], ...]:
    """``ranges`` in order, those that overlap or lie less than ``gap`` bytes apart made one."""
    spans: list[list[int]] = []
    for start, end in sorted(ranges):
        if spans and start <= spans[-1][1] + gap:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return tuple((start, end) for start, end in spans)


def fetch_spans(fs: Any, path: str, spans: Sequence[tuple[int, int]], most: int) -> list[tuple[int, bytes]]:
    """The bytes of each span of ``path``, fetched at once in requests of at most ``most`` bytes, within the deadline.

    A span is cut into equal requests: each request streams at one
    connection's speed, so a large column chunk comes in as fast as a small one.
    """
    cuts = []
    for start, end in spans:
        n = max(1, -(-(end - start) // most))
        cuts.append([start + (end - start) * k // n for k in range(n + 1)])
    starts = [a for bounds in cuts for a in bounds[:-1]]
    ends = [b for bounds in cuts for b in bounds[1:]]
    found = iter(bounded(fs, "cat_ranges", [path] * len(starts), starts, ends, what=path))
    fetched = []
    for bounds in cuts:
        parts = [next(found) for _ in bounds[:-1]]
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if len(data) != bounds[-1] - bounds[0]:
            raise OSError(
                f"{len(data):,} bytes of {path!r} at {bounds[0]:,} instead of {bounds[-1] - bounds[0]:,}: "
                "the file changed while it was read"
            )
        fetched.append((bounds[0], data))
    return fetched


class FetchedFile:
    """Byte ranges of a Parquet file, fetched, read as the file by ``pyarrow.PythonFile`` (no copy within a range).

    Its size is the end of the last range: pyarrow reads a row group's column
    chunks, from the footer it is given or at the file's end, and nothing else.
    A read of bytes not fetched raises :class:`NotFetchedError`.
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
            first, data = self._ranges[index] if 0 <= index < len(self._ranges) else (0, b"")
            if not first <= position < first + len(data):
                raise NotFetchedError(f"bytes {position}:{stop} of the file were not fetched")
            end = min(stop, first + len(data))
            parts.append(memoryview(data)[position - first : end - first])
            position, index = end, index + 1
        self._position = stop
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read(self, nbytes: int = -1) -> bytes:
        return bytes(self.read_buffer(self._size - self._position if nbytes < 0 else nbytes))

    def close(self) -> None:
        self.closed = True


def bytes_of(fetched: Fetched) -> tuple[int, bytes]:
    """Where a fetched range starts, and its bytes (all of them: a short read raises ``OSError``)."""
    (_, first, end), future = fetched
    data = future.result()
    if len(data) != end - first:
        raise OSError(f"{len(data):,} bytes at {first:,} instead of {end - first:,}")
    return first, data
