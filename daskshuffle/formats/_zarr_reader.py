"""Reading a Zarr pile store at the machine's read speed, and checking what it reads.

zarr-python spends about 0.3 to 0.5 ms on every chunk it reads, whatever its
size. A pile is a contiguous run of rows, so the reader here skips zarr: it
works out which chunk files of every variable hold the rows, reads each whole
file with one call (``os.preadv`` straight into the output array for a local
file stored without compressor; ``fsspec`` ``cat`` of many files at once on
any other filesystem), verifies each chunk's crc32c, decodes with numcodecs,
and checks every size. File reads, crc32c of large buffers and decoding
release the GIL, so the loader's prefetch threads read piles in parallel; a
reader opened with ``threads=k`` also spreads the chunks of one read over a
pool of ``k`` threads of its own (measured no faster on a busy 2-core machine,
hence not the default).

It understands the codec pipelines a pile store may hold: ``bytes``
(little-endian), optionally one compressor (blosc, zstd or gzip), optionally
``crc32c`` last. Any other variable (another pipeline, fixed-length strings,
a pile store of format version 1) is read through zarr, without checks.

A missing chunk file is an error when the store records that every chunk was
written (format version 2); a truncated or corrupted one always is. The error,
:class:`~daskshuffle.CorruptPileStoreError`, names the store, the pile, the
variable and the file.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import fsspec.implementations.local
import google_crc32c
import numcodecs
import numpy as np
import zarr
from numpy.typing import NDArray
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec

from .._errors import CorruptPileStoreError, DaskShuffleValueError, IncompletePileStoreError, SourceNotFoundError
from .._paths import exists, filesystem, normalize
from ._base import PileReader, check_pile_metadata, select_variables
from ._layout import LAYOUT_KEY
from ._zarr import _METADATA_KEY, ArrayRows, _concat, _read_in_runs, _take

__all__ = ["ZarrPileReader"]

#: The chunks of one variable are read in tasks of about this many bytes, spread over the pool.
TASK_NBYTES = 2 * 2**20
#: Fallback reads through zarr go in runs of whole chunks of about this size.
READ_NBYTES = 32 * 2**20
_FAST_KINDS = "biufcmM"
_CRC_NBYTES = 4


@dataclass(frozen=True)
class _Chunks:
    """How to read the chunk files of one variable without zarr."""

    name: str
    directory: str
    dtype: np.dtype[Any]
    row_shape: tuple[int, ...]
    chunk_rows: int
    key: Callable[[tuple[int, ...]], str]
    compressor: Any  # a numcodecs codec, or None
    checksum: bool
    every_chunk_written: bool
    fill_value: Any
    row_nbytes: int
    #: The compressor decodes straight into the output (blosc: its header says the size).
    direct: bool = False

    @property
    def chunk_nbytes(self) -> int:
        return self.chunk_rows * self.row_nbytes

    def path(self, index: int) -> str:
        return f"{self.directory}/{self.key((index,) + (0,) * len(self.row_shape))}"


def _numcodec(codec: Any) -> Any:
    """The numcodecs codec that decodes what zarr's ``codec`` encoded, or ``None`` if there is none."""
    if isinstance(codec, BloscCodec):
        return numcodecs.Blosc()  # a blosc frame describes itself
    if isinstance(codec, ZstdCodec):
        return numcodecs.Zstd()
    if isinstance(codec, GzipCodec):
        return numcodecs.GZip()
    return None


def _chunks_of(array: zarr.Array[Any], directory: str, every_chunk_written: bool) -> _Chunks | None:
    """How to read ``array`` without zarr, or ``None`` if zarr must read it."""
    metadata = array.metadata
    dtype = np.dtype(array.dtype) if isinstance(array.dtype, np.dtype) else None
    if metadata.zarr_format != 3 or dtype is None or dtype.kind not in _FAST_KINDS or array.ndim == 0:
        return None
    serializer = array.serializer
    if not isinstance(serializer, BytesCodec) or array.filters:
        return None
    if dtype.itemsize > 1 and (serializer.endian is None or serializer.endian.value != "little"):
        return None
    if tuple(array.chunks[1:]) != tuple(array.shape[1:]):
        return None  # a row split over several chunks
    codecs = list(array.compressors)
    checksum = bool(codecs) and isinstance(codecs[-1], Crc32cCodec)
    if checksum:
        codecs.pop()
    if len(codecs) > 1:
        return None
    compressor = _numcodec(codecs[0]) if codecs else None
    if codecs and compressor is None:
        return None
    row_shape = tuple(array.shape[1:])
    return _Chunks(
        name=array.basename,
        directory=directory,
        dtype=dtype.newbyteorder("=") if dtype.itemsize > 1 else dtype,
        row_shape=row_shape,
        chunk_rows=int(array.chunks[0]),
        key=metadata.chunk_key_encoding.encode_chunk_key,
        compressor=compressor,
        checksum=checksum,
        every_chunk_written=every_chunk_written,
        fill_value=array.fill_value,
        row_nbytes=int(dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))),
        direct=isinstance(compressor, numcodecs.Blosc),
    )


def _shutdown(pool: ThreadPoolExecutor) -> None:
    pool.shutdown(wait=False, cancel_futures=True)


class ZarrPileReader(PileReader[ArrayRows]):
    """A complete Zarr pile store, opened read-only.

    Safe to use from several threads at once, and to pickle (into torch
    ``DataLoader`` workers). Reads run in the caller's thread; with
    ``threads=k`` the chunks of one read are spread over a pool of ``k``
    threads, made again after pickling, which :meth:`close` (or ``with``) joins.

    Examples
    --------
    >>> reader = ZarrPileReader("piles.zarr")  # doctest: +SKIP
    >>> reader.read_pile(0)["x"].shape  # doctest: +SKIP
    (16384, 64)
    >>> reader.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        store: str | os.PathLike[str],
        variables: Sequence[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        batch_format: str = "numpy",
        threads: int = 0,
    ) -> None:
        if batch_format != "numpy":
            raise DaskShuffleValueError(
                f"Expected batch_format='numpy' for a Zarr pile store, whose batches are dicts of numpy arrays. "
                f"Got {batch_format!r} instead; 'arrow' and 'pandas' batches come from Parquet pile stores."
            )
        if not exists(store, storage_options):
            raise SourceNotFoundError(
                f"Expected an existing pile store. Got {os.fspath(store)!r}, which does not exist, instead."
            )
        try:
            group = zarr.open_group(normalize(store), mode="r", storage_options=storage_options)
        except (FileNotFoundError, ValueError, zarr.errors.BaseZarrError) as error:
            raise IncompletePileStoreError(
                f"Expected a Zarr pile store. Got {os.fspath(store)!r}, which is not a Zarr group ({error}), instead."
            ) from error
        metadata = group.attrs.get(_METADATA_KEY)
        self.store = os.fspath(store)
        if not isinstance(metadata, dict):
            raise IncompletePileStoreError(
                f"Expected a pile store written by daskshuffle. Got {self.store!r}, which has no daskshuffle metadata, "
                "instead."
            )
        check_pile_metadata(metadata, self.store)
        self.metadata = metadata
        names = select_variables(metadata, variables)
        self.arrays: dict[str, zarr.Array[Any]] = {}
        for name in names:
            array = group.get(name)
            if not isinstance(array, zarr.Array):
                raise IncompletePileStoreError(
                    f"Expected pile store {self.store!r} to hold an array {name!r}. Got {type(array).__name__} instead; "
                    "shuffle the source again."
                )
            self.arrays[name] = array
        self._fs, root = filesystem(store, storage_options)
        self._local = isinstance(self._fs, fsspec.implementations.local.LocalFileSystem)
        written = (metadata.get(LAYOUT_KEY) or {}).get("variables", {})
        self._chunks: dict[str, _Chunks] = {}
        if metadata.get("format_version", 1) >= 2:
            for name, array in self.arrays.items():
                chunks = _chunks_of(array, f"{root}/{array.path}", name in written)
                if chunks is not None:
                    self._chunks[name] = chunks
        self.threads = threads
        self._lock = threading.Lock()
        self._buffers = threading.local()
        self._pool: ThreadPoolExecutor | None = None

    # -- pickling and closing ------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lock": None, "_pool": None, "_buffers": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._buffers = threading.local()

    def close(self) -> None:
        """Join the reader's threads. Reading again starts new ones."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ZarrPileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="daskshuffle-zarr-reader")
                weakref.finalize(self, _shutdown, self._pool)
            return self._pool

    # -- reading -------------------------------------------------------------
    def read_rows(self, start: int, stop: int) -> ArrayRows:
        return self._read(start, stop, None)

    def read_pile(self, pile: int) -> ArrayRows:
        offsets = self.pile_offsets
        return self._read(int(offsets[pile]), int(offsets[pile + 1]), pile)

    def _read(self, start: int, stop: int, pile: int | None) -> ArrayRows:
        stop = max(start, min(stop, self.n_rows))
        rows: ArrayRows = {}
        tasks: list[tuple[_Chunks, NDArray[Any], int, int]] = []
        for name, array in self.arrays.items():
            chunks = self._chunks.get(name)
            if chunks is None:
                rows[name] = _read_in_runs(array, start, stop, READ_NBYTES)
                continue
            rows[name] = np.empty((stop - start, *chunks.row_shape), dtype=chunks.dtype)
            if stop == start:
                continue
            first, last = start // chunks.chunk_rows, (stop - 1) // chunks.chunk_rows + 1
            step = max(1, TASK_NBYTES // max(chunks.chunk_nbytes, 1))
            tasks += [(chunks, rows[name], index, min(index + step, last)) for index in range(first, last, step)]
        self._run(tasks, start, stop, pile)
        return rows

    def _run(
        self, tasks: list[tuple[_Chunks, NDArray[Any], int, int]], start: int, stop: int, pile: int | None
    ) -> None:
        """Run ``tasks``, the first here and the others in the pool; raise the first error once all are done."""
        if not tasks:
            return
        futures: list[Future[None]] = []
        if self.threads > 0 and len(tasks) > 1:
            pool = self._executor()
            futures = [pool.submit(self._read_chunks, *task, start, stop, pile) for task in tasks[1:]]
        errors: list[BaseException] = []
        try:
            for task in tasks if not futures else tasks[:1]:
                self._read_chunks(*task, start, stop, pile)
        except BaseException as error:
            errors.append(error)
        # Every task writes into the output: wait for all of them, even after an error.
        for future in futures:
            try:
                future.result()
            except BaseException as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def _read_chunks(
        self, chunks: _Chunks, out: NDArray[Any], first: int, last: int, start: int, stop: int, pile: int | None
    ) -> None:
        """Copy the rows ``start:stop`` that chunks ``first:last`` of ``chunks`` hold into ``out``."""
        flat = out.reshape(-1).view(np.uint8)
        if self._local:
            for index in range(first, last):
                self._read_local(chunks, flat, index, start, stop, pile)
            return
        paths = [chunks.path(index) for index in range(first, last)]
        # One call for many files: an async filesystem (S3, GCS, HTTP) fetches them concurrently.
        found = self._fs.cat_ranges(paths, [None] * len(paths), [None] * len(paths), on_error="return")
        for index, path, data in zip(range(first, last), paths, found, strict=True):
            if isinstance(data, FileNotFoundError):
                self._missing(chunks, flat, index, path, start, stop, pile)
            elif isinstance(data, BaseException):
                raise self._damage(chunks, index, path, pile, f"an error reading it ({data})") from data
            else:
                target = self._target(chunks, flat, index, start, stop)
                decoded = self._decode(chunks, np.frombuffer(data, np.uint8), index, path, pile, target)
                if target is None:
                    self._place(chunks, flat, index, decoded, start, stop)
                elif decoded is not target:
                    target[...] = decoded

    def _read_local(
        self, chunks: _Chunks, flat: NDArray[np.uint8], index: int, start: int, stop: int, pile: int | None
    ) -> None:
        path = chunks.path(index)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self._missing(chunks, flat, index, path, start, stop, pile)
            return
        try:
            size = os.fstat(fd).st_size
            target = self._target(chunks, flat, index, start, stop)
            if chunks.compressor is None:
                expected = chunks.chunk_nbytes + (_CRC_NBYTES if chunks.checksum else 0)
                if size != expected:
                    raise self._damage(chunks, index, path, pile, f"a file of {size:,} bytes instead of {expected:,}")
                # Raw rows go straight into the output (a partial chunk through a buffer), the crc beside them.
                data = self._scratch(chunks.chunk_nbytes) if target is None else target
                crc = np.empty(_CRC_NBYTES, dtype=np.uint8)
                buffers = [data.data, crc.data] if chunks.checksum else [data.data]
                if os.preadv(fd, buffers, 0) != expected:
                    raise self._damage(chunks, index, path, pile, "fewer bytes than its size")
                if chunks.checksum and google_crc32c.value(data) != int.from_bytes(crc.tobytes(), "little"):
                    raise self._damage(chunks, index, path, pile, "bytes whose crc32c does not match")
            else:
                data = self._scratch(size)
                if os.preadv(fd, [data.data], 0) != size:
                    raise self._damage(chunks, index, path, pile, "fewer bytes than its size")
                data = self._decode(chunks, data, index, path, pile, target)
            if target is None:
                self._place(chunks, flat, index, data, start, stop)
        finally:
            os.close(fd)

    # -- one chunk -------------------------------------------------------------
    def _scratch(self, nbytes: int) -> NDArray[np.uint8]:
        """A buffer of this thread's for ``nbytes`` of a file, reused from chunk to chunk.

        Reading into fresh memory costs a page fault per page: it ran at a third
        of the speed of reading into a buffer used before.
        """
        buffer: NDArray[np.uint8] | None = getattr(self._buffers, "buffer", None)
        if buffer is None or len(buffer) < nbytes:
            buffer = np.empty(nbytes, dtype=np.uint8)
            self._buffers.buffer = buffer
        return buffer[:nbytes]

    @staticmethod
    def _span(chunks: _Chunks, index: int, start: int, stop: int) -> tuple[int, int]:
        """The rows of ``start:stop`` that chunk ``index`` holds."""
        return max(start, index * chunks.chunk_rows), min(stop, (index + 1) * chunks.chunk_rows)

    @staticmethod
    def _target(
        chunks: _Chunks, flat: NDArray[np.uint8], index: int, start: int, stop: int
    ) -> NDArray[np.uint8] | None:
        """Where chunk ``index`` goes in the output if all of it is wanted, else ``None``."""
        first = index * chunks.chunk_rows
        if first < start or first + chunks.chunk_rows > stop:
            return None
        return flat[(first - start) * chunks.row_nbytes : (first - start + chunks.chunk_rows) * chunks.row_nbytes]

    def _decode(
        self,
        chunks: _Chunks,
        data: NDArray[np.uint8],
        index: int,
        path: str,
        pile: int | None,
        target: NDArray[np.uint8] | None = None,
    ) -> NDArray[np.uint8]:
        """The chunk's rows as bytes from the file's bytes, checked (decoded into ``target`` where possible)."""
        if chunks.checksum:
            if len(data) < _CRC_NBYTES:
                raise self._damage(chunks, index, path, pile, f"a file of {len(data)} bytes, too short for a crc32c")
            body = data[:-_CRC_NBYTES]
            if google_crc32c.value(body) != int.from_bytes(data[-_CRC_NBYTES:].tobytes(), "little"):
                raise self._damage(chunks, index, path, pile, "bytes whose crc32c does not match")
            data = body
        if chunks.compressor is not None:
            try:
                # Bytes 4:8 of a blosc frame's 16-byte header: its decoded size.
                fits = len(data) >= 16 and int.from_bytes(data[4:8].tobytes(), "little") == chunks.chunk_nbytes
                if chunks.direct and target is not None and fits:
                    chunks.compressor.decode(data, out=target)
                    return target
                data = np.frombuffer(chunks.compressor.decode(data), dtype=np.uint8)
            except Exception as error:
                raise self._damage(chunks, index, path, pile, f"bytes its codec cannot decode ({error})") from error
        if len(data) != chunks.chunk_nbytes:
            raise self._damage(
                chunks, index, path, pile, f"{len(data):,} bytes of rows instead of {chunks.chunk_nbytes:,}"
            )
        return data

    def _place(
        self, chunks: _Chunks, flat: NDArray[np.uint8], index: int, data: NDArray[np.uint8], start: int, stop: int
    ) -> None:
        lo, hi = self._span(chunks, index, start, stop)
        offset, nbytes = index * chunks.chunk_rows, chunks.row_nbytes
        flat[(lo - start) * nbytes : (hi - start) * nbytes] = data[(lo - offset) * nbytes : (hi - offset) * nbytes]

    def _missing(
        self, chunks: _Chunks, flat: NDArray[np.uint8], index: int, path: str, start: int, stop: int, pile: int | None
    ) -> None:
        if chunks.every_chunk_written:
            raise self._damage(chunks, index, path, pile, "no such file")
        # zarr leaves out a chunk that is all fill value, unless told to write every chunk.
        lo, hi = self._span(chunks, index, start, stop)
        fill = np.full((hi - lo, *chunks.row_shape), chunks.fill_value, dtype=chunks.dtype)
        flat[(lo - start) * chunks.row_nbytes : (hi - start) * chunks.row_nbytes] = fill.reshape(-1).view(np.uint8)

    def _damage(self, chunks: _Chunks, index: int, path: str, pile: int | None, got: str) -> CorruptPileStoreError:
        rows = f"rows {index * chunks.chunk_rows}:{(index + 1) * chunks.chunk_rows}"
        where = f"pile {pile}, " if pile is not None else ""
        return CorruptPileStoreError(
            f"Expected chunk file {path!r} of variable {chunks.name!r} ({where}{rows}) of pile store {self.store!r} "
            f"to be whole and to match its checksum. Got {got} instead; the store is damaged: restore the file from a "
            "copy, or shuffle the source again into a new pile store."
        )

    # -- rows in memory --------------------------------------------------------
    def take(self, rows: ArrayRows, index: NDArray[np.intp]) -> ArrayRows:
        return _take(rows, index)

    def concat(self, parts: Sequence[ArrayRows]) -> ArrayRows:
        return _concat(parts)

    def n_rows_of(self, rows: ArrayRows) -> int:
        return len(next(iter(rows.values()))) if rows else 0

    @classmethod
    def recognizes(cls, store: str, storage_options: dict[str, Any] | None = None) -> bool:
        return exists(f"{normalize(store)}/zarr.json", storage_options)
