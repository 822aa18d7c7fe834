"""Text files as a shuffle's source: files, blocks of lines, and counting them.

A row is one line's bytes including its delimiter (``\\n``, or NUL for ``shuf -z``); a final line without one gets
one. Nothing is decoded, so any encoding that writes the delimiter as that one byte round-trips byte for byte. Rows
in memory are a :class:`pyarrow.LargeBinaryArray` (:data:`Lines`): reordering lines is one Arrow ``take``, with no
Python object per line. A block owns every line that *starts* in its byte range of a plain file, so a line is never
split and a large file is read in parallel; a compressed file is first decompressed to a plain copy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import mmap
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TypeAlias

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import infer_compression
from numpy.typing import NDArray

from .._errors import Argument, DaskShuffleValueError
from .._threads import each
from ..storage import Location, bounded
from ._found import found

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BlockCount",
    "Lines",
    "Run",
    "TextSource",
    "concat_lines",
    "line_bytes",
    "line_offsets",
    "lines_of",
    "open_text_sources",
    "take_lines",
]

Lines: TypeAlias = "pa.LargeBinaryArray"

#: What runs the tasks of a step, as ``run(function, arguments, token)``: ``function(*args)`` for every ``args`` of
#: ``arguments``, in parallel on the shuffle's scheduler (the work named by ``token``), the results in order.
Run = Callable[[Callable[..., Any], Sequence[tuple[Any, ...]], str], list[Any]]

#: Newlines are counted and located in windows of this size: small enough for the temporary mask to stay in cache.
_COUNT_NBYTES = 2**20
#: How much is copied at a time (decompressing a file, concatenating parts).
_READ_NBYTES = 8 * 2**20
#: How much is read at a time to find where a line starts (on object storage, one request).
_LINE_NBYTES = 2**16


def memory_pool() -> pa.MemoryPool:
    """Arrow's mimalloc pool, where Arrow was built with it: it gathers lines into fresh memory faster than jemalloc."""
    import pyarrow as pa

    try:
        return pa.mimalloc_memory_pool()
    except NotImplementedError:
        return pa.default_memory_pool()


def take_lines(rows: Lines, index: NDArray[np.intp] | NDArray[np.int64]) -> Lines:
    """The lines at ``index``, copied (a result does not hold on to the whole buffer it was taken from)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.take(rows, pa.array(index, type=pa.int64()), memory_pool=memory_pool())


def concat_lines(parts: Sequence[Lines]) -> Lines:
    """The lines of ``parts`` one after the other (none for no parts)."""
    import pyarrow as pa

    if len(parts) == 1:
        return parts[0]
    return pa.concat_arrays(list(parts), memory_pool=memory_pool()) if parts else pa.array([], pa.large_binary())


def lines_of(n_lines: int, offsets: NDArray[np.int64], data: Any) -> Lines:
    """``n_lines`` lines of ``data`` (bytes or a buffer), delimited by ``offsets``, without a copy: ``ArrowInvalid``
    if either is too short for them."""
    import pyarrow as pa

    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.large_binary(), n_lines, buffers)


def line_offsets(lines: Lines) -> NDArray[np.int64]:
    """Byte offsets of ``lines`` in its data buffer, ``len(lines) + 1`` of them."""
    buffer = lines.buffers()[1]
    if buffer is None:
        return np.zeros(1, dtype=np.int64)
    return np.frombuffer(buffer, dtype=np.int64, count=len(lines) + 1, offset=lines.offset * 8)


def line_bytes(lines: Lines) -> memoryview:
    """The bytes of ``lines``, one after the other, without a copy."""
    if len(lines) == 0:
        return memoryview(b"")
    offsets = line_offsets(lines)
    return memoryview(lines.buffers()[2])[int(offsets[0]) : int(offsets[-1])]


def with_final_newline(data: bytes, delimiter: bytes) -> bytes:
    """``data`` with ``delimiter`` after its last line, if it lacks one (empty ``data`` stays empty)."""
    return data + delimiter if data and not data.endswith(delimiter) else data


@dataclass(frozen=True)
class TextFile:
    """One input file: where it is, its size on storage and how it is compressed."""

    location: Location
    size: int
    compression: str | None

    @property
    def path(self) -> str:
        """The file's path or URL, as a pile store records its sources."""
        return self.location.url

    @contextlib.contextmanager
    def open(self, buffer_nbytes: int = _LINE_NBYTES) -> Iterator[Any]:
        """The file opened for reading its bytes, decompressed, each request within the request deadline
        (:meth:`~daskshuffle.storage.Location.reading`, buffered ``buffer_nbytes`` at a time)."""
        with self.location.reading(self.size, buffer_nbytes=buffer_nbytes) as file:
            if self.compression is None:
                yield file
                return
            decompressed = fsspec.compression.compr[self.compression](file, mode="rb")
            try:
                yield decompressed
            finally:
                decompressed.close()


@dataclass(frozen=True)
class BlockCount:
    """Lines in a block and their bytes, a newline added to a final line that lacks one."""

    n_lines: int
    n_bytes: int


def _read_range(fs: Any, path: str, start: int, stop: int) -> Any:
    """Bytes ``[start, stop)`` of ``path``.

    For local files a view of the page cache (the merge copies it once, into
    the pile), elsewhere one request within the deadline (by keyword: s3fs's
    second positional is a version id).
    """
    if stop <= start:
        return b""
    if not isinstance(fs, LocalFileSystem):
        return bounded(fs, "cat_file", path, start=start, end=stop, what=path)
    aligned = start - start % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as file:
        mapped = mmap.mmap(file.fileno(), stop - aligned, access=mmap.ACCESS_READ, offset=aligned)
    return memoryview(mapped)[start - aligned :]


def _through_delimiter(handle: IO[bytes], delimiter: bytes) -> bytes:
    """The bytes from ``handle``'s position through its next ``delimiter`` (or to the end)."""
    read: list[bytes] = []
    # Not readline(): zstandard's stream reader does not have it.
    while chunk := bytes(handle.read(_LINE_NBYTES)):
        end = chunk.find(delimiter)
        if end >= 0:
            return b"".join([*read, chunk[: end + 1]])
        read.append(chunk)
    return b"".join(read)


def _line_start(file: IO[bytes], position: int, size: int, delimiter: bytes) -> int:
    """The first line start at or after ``position``: 0, or just after a ``delimiter``."""
    if position <= 0 or position >= size:
        return min(max(position, 0), size)
    file.seek(position - 1)
    return position - 1 + len(_through_delimiter(file, delimiter))


@dataclass(frozen=True)
class TextSource:
    """Text files cut into blocks, before their lines are counted.

    Sent to every task, so it stays small: the files, and how they are cut
    (every ``block_nbytes`` bytes), from which a task works out its own block.
    Compressed files are cut once :meth:`decompressed` has made plain copies.
    """

    files: tuple[TextFile, ...]
    block_nbytes: int
    #: The header line as written to the output (with a newline), and its bytes in the first file.
    header: bytes
    header_nbytes: int
    #: The byte that ends a line: a newline, or NUL for zero-terminated records.
    delimiter: bytes

    @functools.cached_property
    def first_blocks(self) -> NDArray[np.int64]:
        """The first block of every file, and the number of blocks."""
        per_file = [
            -(-max(file.size - self._skip(index), 0) // self.block_nbytes) for index, file in enumerate(self.files)
        ]
        return np.concatenate([[0], np.cumsum(per_file, dtype=np.int64)]).astype(np.int64)

    def _skip(self, file: int) -> int:
        return self.header_nbytes if file == 0 else 0

    @property
    def n_blocks(self) -> int:
        return int(self.first_blocks[-1])

    def block(self, block: int) -> tuple[int, int, int]:
        """Where block ``block`` lies: ``(file, start, stop)``, its lines being those that start in bytes
        ``[start, stop)`` of file ``file``."""
        index = int(np.searchsorted(self.first_blocks, block, side="right")) - 1
        start = self._skip(index) + (block - int(self.first_blocks[index])) * self.block_nbytes
        return index, start, min(start + self.block_nbytes, self.files[index].size)

    def path_of(self, block: int) -> str:
        """The path of the file block ``block`` is in, for messages."""
        return self.files[self.block(block)[0]].path

    def describe(self) -> list[str]:
        return [file.path for file in self.files]

    def decompress(self, file: int, path: Location) -> int:
        """Write file ``file`` decompressed to ``path``, a piece at a time, each request within the request deadline;
        return its size (a task)."""
        with self.files[file].open(_READ_NBYTES) as handle, path.writing() as out:
            shutil.copyfileobj(handle, out, _READ_NBYTES)
            return int(out.tell())

    def decompressed(self, spool: Location, run: Run) -> TextSource:
        """This source with every compressed file, which cannot be read from the middle, decompressed into ``spool``
        (one task a file) and read there in parallel blocks."""
        compressed = [index for index, file in enumerate(self.files) if file.compression is not None]
        if not compressed:
            return self
        spool.makedirs()
        paths = [spool.join(f"{index}.txt") for index in compressed]
        sizes = run(self.decompress, list(zip(compressed, paths, strict=True)), repr((self.files, spool.url)))
        files = list(self.files)
        for index, path, size in zip(compressed, paths, sizes, strict=True):
            files[index] = TextFile(path, size=size, compression=None)
        return dataclasses.replace(self, files=tuple(files))

    def _read(self, block: int) -> bytes:
        """The bytes of ``block``'s lines, from its first line start to the next block's, read with one request; a
        newline after a final line that lacks one."""
        file, first, last = self.block(block)
        size = self.files[file].size
        with self.files[file].open() as handle:
            start = _line_start(handle, first, size, self.delimiter)
            stop = _line_start(handle, last, size, self.delimiter)
            handle.seek(start)
            data = handle.read(stop - start)
        if len(data) != stop - start:
            raise DaskShuffleValueError(
                f"Expected {self.path_of(block)!r} to stay as it was when the shuffle started. Got a file of another "
                "size instead; do not change a source while it is being shuffled."
            )
        return with_final_newline(data, self.delimiter)

    def count_block(self, block: int) -> BlockCount:
        """Count the lines of ``block`` (a task of the counting step)."""
        view = np.frombuffer(self._read(block), dtype=np.uint8)
        # Counted, not split: twice as fast as finding every line's offset.
        windows = range(0, len(view), _COUNT_NBYTES)
        n_lines = sum(
            int(np.count_nonzero(view[start : start + _COUNT_NBYTES] == ord(self.delimiter))) for start in windows
        )
        return BlockCount(n_lines, len(view))

    def read_counted(self, block: int) -> tuple[BlockCount, Lines]:
        """Every line of ``block`` and their count, as :meth:`count_block` gives it (a final line's newline added)."""
        rows = self.read_lines(block)
        return BlockCount(len(rows), len(line_bytes(rows))), rows

    def counted_lines(self, block: int, n_lines: int, *, sampled: bool = False) -> Lines:
        """Every line of ``block``, which held ``n_lines`` lines when counted (at least, for a read of ``sampled``
        lines): an error if it holds another number now."""
        lines = self.read_lines(block)
        if len(lines) < n_lines or (len(lines) > n_lines and not sampled):
            raise DaskShuffleValueError(
                f"Expected {'at least ' if sampled else ''}{n_lines:,} lines in block {block} of "
                f"{self.path_of(block)!r}, as counted. Got {len(lines):,} instead; do not change a source while it is "
                f"being {'sampled' if sampled else 'shuffled'}."
            )
        return lines

    def read_lines(self, block: int) -> Lines:
        """Every line of ``block``, read with one request."""
        data = self._read(block)
        view = np.frombuffer(data, dtype=np.uint8)
        ends = [
            np.flatnonzero(view[start : start + _COUNT_NBYTES] == ord(self.delimiter)) + (start + 1)
            for start in range(0, len(view), _COUNT_NBYTES)
        ]
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), *ends]).astype(np.int64, copy=False)
        return lines_of(len(offsets) - 1, offsets, data)


def _expand(item: str, storage_options: dict[str, Any] | None) -> list[tuple[Location, int]]:
    """The files ``item`` names, with their sizes: itself, or the files a glob matches (:func:`found`)."""
    where = Location.of(item, storage_options)
    matched, info = found(where, item, "existing text files")
    if info is not None:
        if info["type"] == "directory":
            raise DaskShuffleValueError(
                f"Expected src to name text files. Got {item!r}, which is a directory, instead; "
                f"pass a glob such as {item.rstrip('/') + '/*.txt'!r}."
            )
        return [(where, int(info["size"]))]
    return [
        (Location.of(path if where.is_local else where.fs.unstrip_protocol(path), storage_options), int(entry["size"]))
        for path, entry in (matched or {}).items()
    ]


def open_text_sources(
    src: Sequence[str],
    *,
    header: bool,
    block_nbytes: int,
    storage_options: dict[str, Any] | None = None,
    delimiter: bytes = b"\n",
) -> TextSource:
    """List and check every input file and cut them into blocks; raise before anything is written.

    ``src`` holds paths, globs or URLs (already strings). Compression is
    inferred from each file's extension, as fsspec does. ``delimiter`` is the
    one byte that ends a line (``b"\\0"`` for zero-terminated records).
    """
    # One request or listing an item, together: a list of many URLs waits out a few round trips.
    paths = [path for listed in each(lambda item: _expand(item, storage_options), src) for path in listed]
    files = []
    for path, size in paths:
        compression = infer_compression(path.path)
        if compression is not None and compression not in fsspec.compression.compr:
            raise DaskShuffleValueError(
                f"Expected a compression this installation reads. Got {path.url!r}, compressed with {compression!r}, "
                "instead; install the package it needs (zstandard for .zst) or decompress the file first."
            )
        files.append(TextFile(path, size=size, compression=compression))
    first_header = b""
    if header:
        with files[0].open() as handle:
            first_header = _through_delimiter(handle, delimiter)
        if not first_header:
            raise DaskShuffleValueError(
                (
                    "Expected the first file to start with a header line, as ",
                    Argument("header", True),
                    f" says. Got {files[0].path!r}, which is empty, instead; ",
                    Argument("header", False, passed=True),
                    " or put the file with the header first.",
                )
            )
    return TextSource(
        tuple(files),
        block_nbytes=block_nbytes,
        header=with_final_newline(first_header, delimiter),
        header_nbytes=len(first_header),
        delimiter=delimiter,
    )
