"""Reading the chunk files of a Zarr pile store without zarr, and checking each one.

A :class:`Chunks` says how one variable's chunks are stored; :class:`ChunkFiles`
reads them into an output array: each file whole with one call (``os.preadv``
straight into the output for a local file without compressor, ``cat_ranges``
of many files at once elsewhere), its size and crc32c checked.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fsspec.implementations.local
import numcodecs
import numcodecs.blosc
import numpy as np
from fsspec import AbstractFileSystem
from numpy.typing import NDArray

from .._config import int_setting
from .._errors import CorruptPileStoreError
from ..formats import ARRAY_KINDS, crc32c
from ..pilestore import carries_crc
from ..storage import Fetches, StoreCache, bounded, crash_point, raise_storage_failure
from ._cancel import CancellableRead
from ._opened import Opened
from ._zarr_decode import ZarrDecode

if TYPE_CHECKING:
    import zarr

__all__ = ["ChunkFiles", "Chunks", "chunks_of"]

_CRC_NBYTES = 4


@dataclass(frozen=True)
class Chunks:
    """How to read the chunk files of one variable without zarr."""

    name: str
    directory: str
    dtype: np.dtype[Any]
    row_shape: tuple[int, ...]
    chunk_rows: int
    key: Callable[[tuple[int, ...]], str]
    compressor: Any  # a numcodecs codec, a ZarrDecode of any other pipeline, or None
    checksum: bool
    row_nbytes: int
    n_rows: int
    #: The compressor is blosc: decoded by numcodecs.blosc, a large chunk straight into the output (its header says the size).
    direct: bool
    #: The crc32c the run recorded for each chunk, by index.
    expected: NDArray[np.uint32]

    @property
    def chunk_nbytes(self) -> int:
        return self.chunk_rows * self.row_nbytes

    def shared(self, index: int, start: int, stop: int) -> bool:
        """Whether chunk ``index`` holds rows outside ``start:stop`` too: rows another read will need."""
        first = index * self.chunk_rows
        return first < start or min(first + self.chunk_rows, self.n_rows) > stop

    def path(self, index: int) -> str:
        return f"{self.directory}/{self.key((index,) + (0,) * len(self.row_shape))}"


def chunks_of(array: zarr.Array[Any], directory: str, store: str, expected: NDArray[np.uint32]) -> Chunks:
    """How to read ``array``'s chunk files and check them (against ``expected``, their recorded crc32c).

    ``bytes``, at most one blosc, zstd or gzip compressor and crc32c decode with
    numcodecs; any other pipeline with zarr (:class:`ZarrDecode`). An array a
    pile store cannot hold raises :class:`~daskshuffle.CorruptPileStoreError`
    naming ``store``.
    """
    from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec

    metadata = array.metadata
    dtype = np.dtype(array.dtype) if isinstance(array.dtype, np.dtype) else None
    # Chunks of whole rows: check_shapes proved them.
    if metadata.zarr_format != 3 or dtype is None or dtype.kind not in ARRAY_KINDS:
        raise CorruptPileStoreError(
            f"Expected array {array.basename!r} of pile store {store!r} as a shuffle writes it: Zarr v3, of a "
            f"numeric or fixed-length string dtype, whole rows in each chunk. Got dtype {array.dtype}, chunks "
            f"{array.chunks} of shape {array.shape} instead; the store is damaged: shuffle the source again."
        )
    checksum = carries_crc(array)
    codecs = list(array.compressors)[: -1 if checksum else None]
    serializer = array.serializer
    # Fixed-length strings are stored as numpy holds them: byte strings as they are, unicode as UTF-32.
    plain = (
        isinstance(serializer, BytesCodec)
        and not array.filters
        and (dtype.byteorder == "|" or (serializer.endian is not None and serializer.endian.value == "little"))
    )
    # A blosc frame describes itself: numcodecs' Blosc needs none of the codec's settings.
    decoders = {BloscCodec: numcodecs.Blosc, ZstdCodec: numcodecs.Zstd, GzipCodec: numcodecs.GZip}
    made = [decoder() for kind, decoder in decoders.items() if len(codecs) == 1 and isinstance(codecs[0], kind)]
    compressor = made[0] if made else None
    if not plain or (codecs and compressor is None):
        compressor = ZarrDecode(array, metadata.chunk_key_encoding.encode_chunk_key((0,) * array.ndim))
    row_shape = tuple(array.shape[1:])
    return Chunks(
        name=array.basename,
        directory=directory,
        dtype=dtype.newbyteorder("=") if dtype.byteorder != "|" else dtype,
        row_shape=row_shape,
        chunk_rows=int(array.chunks[0]),
        key=metadata.chunk_key_encoding.encode_chunk_key,
        compressor=compressor,
        checksum=checksum,
        row_nbytes=int(dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))),
        n_rows=int(array.shape[0]),
        direct=isinstance(compressor, numcodecs.Blosc),
        expected=expected,
    )


class ChunkFiles:
    """Reads and checks the chunk files of one pile store; safe across threads, picklable."""

    def __init__(self, fs: AbstractFileSystem, store: str, opened: Opened) -> None:
        self._fs = fs
        self.store = store
        #: The store's root as opened: a failed read looks whether it changed since.
        self.opened = opened
        self.local = isinstance(fs, fsspec.implementations.local.LocalFileSystem)
        self._buffers = threading.local()
        self.fetches = None if self.local else Fetches(fs)
        self.cache: StoreCache | None = None
        #: Blosc chunks of at least this many bytes are decoded straight into the output, smaller ones copied there.
        self._direct_nbytes = int_setting("zarr-reader.direct-nbytes")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_buffers": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._buffers = threading.local()

    def read(
        self,
        chunks: Chunks,
        out: NDArray[Any],
        first: int,
        last: int,
        start: int,
        stop: int,
        pile: int | None,
        read: CancellableRead,
    ) -> None:
        """Copy the rows ``start:stop`` that chunks ``first:last`` of ``chunks`` hold into ``out``.

        A chunk that fails its checks raises :class:`~daskshuffle.CorruptPileStoreError`,
        or :class:`~daskshuffle.StoreChangedError` if the store changed since it was opened.
        """
        crash_point("chunk read")
        rows = _Rows(chunks, out.reshape(-1).view(np.uint8), start, stop, pile, self.store)
        with self.opened.unchanged(self.store):
            if self.local:
                for index in range(first, last):
                    self._read_local(rows, index)
                return
            indices = [index for index in range(first, last) if not self._read_cached(rows, index)]
            paths = [chunks.path(index) for index in indices]
            # A chunk with rows of another read too (across the boundary of two piles read apart) is kept for it.
            shared = {path for index, path in zip(indices, paths, strict=True) if chunks.shared(index, start, stop)}
            for index, path, data in zip(indices, paths, self._fetched(paths, start, stop, shared, read), strict=True):
                if isinstance(data, FileNotFoundError):
                    raise rows.damage(index, path, "no such file")
                elif isinstance(data, BaseException):  # not served (credentials, throttled, ...), or damage
                    raise_storage_failure(data, self.store, what=path)
                    raise rows.damage(index, path, f"an error reading it ({data})") from data
                else:
                    target = rows.target(index)
                    rows.put(index, self._decode_fetched(rows, data, index, path, target), target)

    def _read_cached(self, rows: _Rows, index: int) -> bool:
        """Read chunk ``index`` from the local cache like a local file; ``False`` if it is not there, or damaged."""
        cache = self.cache
        if cache is None:
            return False
        path = rows.chunks.path(index)
        opened = cache.open(path)  # never through a link placed in the cache
        if opened is None:
            return False
        try:
            self._read_local(rows, index, f"{path} (cached)", opened)
        except CorruptPileStoreError:  # damaged, or evicted by another loader meanwhile: fetched again
            cache.evict(path)
            return False
        cache.touch(path)
        return True

    def _decode_fetched(
        self, rows: _Rows, data: bytes, index: int, path: str, target: NDArray[np.uint8] | None
    ) -> NDArray[np.uint8]:
        """:meth:`_decode` of bytes fetched (or cached): a damaged cached file is evicted and fetched again."""
        try:
            return self._decode(rows, np.frombuffer(data, np.uint8), index, path, target)
        except CorruptPileStoreError:
            cache = self.cache
            if cache is None or not cache.holds(path):
                raise
            cache.evict(path)
            data = bytes(bounded(self._fs, "cat_file", path, what=path))
            decoded = self._decode(rows, np.frombuffer(data, np.uint8), index, path, target)
            cache.write(path, data)
            return decoded

    def _fetched(self, paths: list[str], start: int, stop: int, shared: set[str], read: CancellableRead) -> list[Any]:
        """The bytes of each file of ``paths`` (or the error reading it); those of ``shared`` kept for the next read."""
        fetches = self.fetches
        assert fetches is not None
        # The read's own requests go out now (a no-op if they did), sharing those under way for others (the loader's).
        key = (start, stop, None)
        fetches.start(key, paths, nbytes=0)
        futures = [fetches.take(key, path, keep=path in shared) for path in paths]
        missing = [path for path, future in zip(paths, futures, strict=True) if future is None]
        if missing:  # files the read started ahead did not ask for (cached then, evicted since): a read of their own
            again = object()
            fetches.start(again, missing, nbytes=0)
            taken = iter([fetches.take(again, path, keep=path in shared) for path in missing])
            futures = [next(taken) if future is None else future for future in futures]
        cache = self.cache
        found: list[Any] = []
        for path, future in zip(paths, futures, strict=True):
            assert future is not None  # every request of a read started is taken once
            read.wait(future, path)  # a stalled request waits for its deadline, or a cancel
            try:
                data = future.result()
            except Exception as error:
                found.append(error)
                continue
            if cache is not None and not cache.holds(path):
                cache.write(path, data)  # here, not on the event loop's thread
            found.append(data)
        return found

    def _read_local(self, rows: _Rows, index: int, path: str | None = None, opened: int | None = None) -> None:
        # Every os call waits to get the GIL back: a file costs three (open, preadv, close), no fstat; a size is
        # checked by reading one byte more. ``path``, ``opened``: a cached copy and its descriptor, closed here.
        chunks = rows.chunks
        path = chunks.path(index) if path is None else path
        try:
            fd = os.open(path, os.O_RDONLY) if opened is None else opened
        except FileNotFoundError:  # the shuffle writes every chunk; a copy (a cache's) that went away is none either
            raise rows.damage(index, path, "no such file") from None
        try:
            target = rows.target(index)
            if chunks.compressor is None:
                expected = chunks.chunk_nbytes + (_CRC_NBYTES if chunks.checksum else 0)
                # Raw rows go straight into the output (a partial chunk through a buffer), the crc beside them.
                data = self._scratch(chunks.chunk_nbytes) if target is None else target
                tail = np.empty(_CRC_NBYTES + 1, dtype=np.uint8)
                size = os.preadv(fd, [data.data, tail.data] if chunks.checksum else [data.data, tail[:1].data], 0)
                if size != expected:
                    got = "fewer bytes than its size" if size < expected else "more bytes than its rows and crc32c"
                    raise rows.damage(index, path, f"{got} (at least {size:,} instead of {expected:,})")
                if chunks.checksum:
                    carried = int.from_bytes(tail[:_CRC_NBYTES].tobytes(), "little")
                    rows.check_crc(index, data, carried, path)
            else:
                # Room for any compressed chunk of these rows but a pathological one; that one costs an fstat.
                room = chunks.chunk_nbytes + chunks.chunk_nbytes // 64 + 1024
                data = self._scratch(room)
                size = os.preadv(fd, [data.data], 0)
                if size == room:
                    room = os.fstat(fd).st_size + 1
                    data = self._scratch(room)
                    size = os.preadv(fd, [data.data], 0)
                    if size == room:
                        raise rows.damage(index, path, "a file that grows while it is read")
                data = self._decode(rows, data[:size], index, path, target)
            rows.put(index, data, target)
        finally:
            os.close(fd)

    def _scratch(self, nbytes: int) -> NDArray[np.uint8]:
        """A buffer of this thread's for ``nbytes`` of a file, reused from chunk to chunk (no page faults)."""
        buffer: NDArray[np.uint8] | None = getattr(self._buffers, "buffer", None)
        if buffer is None or len(buffer) < nbytes:
            buffer = np.empty(nbytes, dtype=np.uint8)
            self._buffers.buffer = buffer
        return buffer[:nbytes]

    def _decode(
        self, rows: _Rows, data: NDArray[np.uint8], index: int, path: str, target: NDArray[np.uint8] | None
    ) -> NDArray[np.uint8]:
        """The chunk's rows as bytes from the file's bytes, checked (decoded into ``target`` where possible)."""
        chunks = rows.chunks
        if chunks.checksum:
            if len(data) < _CRC_NBYTES:
                raise rows.damage(index, path, f"a file of {len(data)} bytes, too short for a crc32c")
            body = data[:-_CRC_NBYTES]
            rows.check_crc(index, body, int.from_bytes(data[-_CRC_NBYTES:].tobytes(), "little"), path)
            data = body
        if chunks.compressor is not None:
            try:
                # Bytes 4:8 of a blosc frame's 16-byte header: its decoded size.
                fits = len(data) >= 16 and int.from_bytes(data[4:8].tobytes(), "little") == chunks.chunk_nbytes
                # Blosc through numcodecs.blosc itself (the codec wraps it in checks of its arguments); into the
                # output only for a large chunk, where checking an output costs less than copying it.
                if chunks.direct and target is not None and fits and chunks.chunk_nbytes >= self._direct_nbytes:
                    numcodecs.blosc.decompress(data, target)
                    return target
                decoded = numcodecs.blosc.decompress(data) if chunks.direct else chunks.compressor.decode(data)
                data = np.frombuffer(decoded, dtype=np.uint8)
            except Exception as error:
                raise rows.damage(index, path, f"bytes its codec cannot decode ({error})") from error
        if len(data) != chunks.chunk_nbytes:
            raise rows.damage(index, path, f"{len(data):,} bytes of rows instead of {chunks.chunk_nbytes:,}")
        return data


@dataclass(frozen=True, slots=True)
class _Rows:
    """Rows ``start:stop`` of one variable being read into ``flat`` (of ``pile``, if one): where each chunk goes."""

    chunks: Chunks
    flat: NDArray[np.uint8]
    start: int
    stop: int
    pile: int | None
    store: str

    def target(self, index: int) -> NDArray[np.uint8] | None:
        """Where chunk ``index`` goes in the output if all of it is wanted, else ``None``."""
        first, rows, nbytes = index * self.chunks.chunk_rows, self.chunks.chunk_rows, self.chunks.row_nbytes
        if first < self.start or first + rows > self.stop:
            return None
        return self.flat[(first - self.start) * nbytes : (first - self.start + rows) * nbytes]

    def put(self, index: int, data: NDArray[np.uint8], target: NDArray[np.uint8] | None) -> None:
        """Put chunk ``index``'s rows, ``data``, in the output: into ``target``, or the part wanted (no target)."""
        if target is not None:
            if data is not target:
                target[...] = data
            return
        offset, nbytes = index * self.chunks.chunk_rows, self.chunks.row_nbytes
        lo, hi = max(self.start, offset), min(self.stop, offset + self.chunks.chunk_rows)  # the rows the chunk holds
        self.flat[(lo - self.start) * nbytes : (hi - self.start) * nbytes] = data[
            (lo - offset) * nbytes : (hi - offset) * nbytes
        ]

    def check_crc(self, index: int, body: NDArray[np.uint8], carried: int, path: str) -> None:
        """Refuse a chunk whose ``body`` fails its crc32c, ``carried``, or that is not the one its run wrote there."""
        if crc32c(body) != carried:
            raise self.damage(index, path, "bytes whose crc32c does not match")
        expected = self.chunks.expected
        if index >= len(expected) or carried != expected[index]:
            recorded = f"{int(expected[index]):#010x}" if index < len(expected) else "no chunk"
            raise self.damage(
                index,
                path,
                f"an intact chunk of crc32c {carried:#010x} where the run recorded {recorded} for this variable at "
                "this place (a chunk of another place, variable, run or store)",
            )

    def damage(self, index: int, path: str, got: str) -> CorruptPileStoreError:
        rows = f"rows {index * self.chunks.chunk_rows}:{(index + 1) * self.chunks.chunk_rows}"
        where = f"pile {self.pile}, " if self.pile is not None else ""
        return CorruptPileStoreError(
            f"Expected chunk file {path!r} of variable {self.chunks.name!r} ({where}{rows}) of pile store "
            f"{self.store!r} to be whole, to match its checksum and to be the chunk its run wrote there. Got {got} "
            "instead; the store is damaged: restore the file from a copy, or shuffle the source again into a new "
            "pile store."
        )
