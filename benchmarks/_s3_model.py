"""A model of S3 for benchmarks: an async fsspec filesystem over a local directory with a request cost.

``S3ModelFileSystem`` (protocol ``s3model``) keeps objects as files below a
local ``root``. URLs have S3's shape, ``s3model://bucket/key``: the first
component of a path is a bucket, a top-level directory of ``root`` (created by
``fs.mkdir("bucket")``, as with s3fs; writing into a missing bucket raises
``FileNotFoundError``). The root travels in ``storage_options``, so one URL and
one ``storage_options`` dict work everywhere daskshuffle, zarr and pyarrow take
them::

    import _s3_model  # registers the "s3model" protocol
    options = {"root": "/tmp/objects", "latency": 0.02, "bandwidth": 100e6}
    daskshuffle.shuffle_zarr("raw.zarr", "s3model://bucket/piles.zarr", 64, storage_options=options)
    daskshuffle.PileLoader("s3model://bucket/piles.zarr", storage_options=options)

What it models, request by request:

- a first-byte latency (``latency`` seconds, default 20 ms) on every request:
  get, put, list, head, delete and server-side copy;
- a per-request bandwidth (``bandwidth`` bytes/s, default 100 MB/s) for the
  bytes a get returns or a put sends: a request of N bytes ends no sooner than
  ``latency + N / bandwidth`` after it starts (the local disk work overlaps
  that time, it is not added to it);
- what a request costs the client's event loop: a get, head or listing does
  its disk work on the loop, as a client copies the bytes it receives there; a
  put, copy or delete does its disk work in a thread of the model's own
  (``SERVER_THREADS`` of them), since a local disk may hold a writer for the
  kernel's writeback, which a network does not, and a put sent on the loop
  would hold up every other request in flight;
- unlimited requests in flight, or at most ``max_in_flight`` per filesystem
  instance and event loop (an ``asyncio.Semaphore``; a request waiting for a
  slot has not started);
- optionally an aggregate link, ``total_bandwidth`` bytes/s per filesystem
  instance, shared first come first served: each transfer reserves the next
  ``N / total_bandwidth`` seconds of the link and ends no sooner than that;
- object-store semantics: no rename (``mv`` is fsspec's copy then delete), no
  append (a file opened for writing is uploaded in one put when it closes),
  directories are prefixes (``mkdir`` below a bucket does nothing, a prefix
  exists while an object lies below it, and disappears with its last object);
  writes are atomic (a reader sees the old object or the new one);
- counts of requests and bytes by kind (``get``, ``put``, ``list``, ``head``,
  ``delete``, ``copy``), shared by every instance in the process:
  ``fs.stats()``, ``fs.reset_stats()``. Bytes are those on the client's link
  (a get's payload, a put's payload); a server-side copy moves none, and
  costs the client no work (a hard link where the disk allows one). A listing
  costs one list request per 1,000 keys returned (S3's page size), at least
  one; a recursive delete costs one delete request per 1,000 keys (S3's
  DeleteObjects), as s3fs does; ``info``/``exists`` cost one head.

What it does not model: conditional writes (``If-None-Match``; daskshuffle's lock warns that it cannot
exclude two runs that start together), throttling (503 SlowDown) and retries, errors of any
kind beyond a missing key or bucket, a real network or HTTP stack (no
serialization, signing or TLS cost), per-connection TCP slow start or
connection-pool limits, server-side copy time, listing consistency delays, and
no limit on the aggregate bandwidth unless ``total_bandwidth`` is given.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import threading
import time
import uuid
import weakref
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

import fsspec
from fsspec.asyn import AsyncFileSystem, sync
from fsspec.spec import AbstractBufferedFile

__all__ = ["KINDS", "S3ModelFile", "S3ModelFileSystem"]

Kind = Literal["get", "put", "list", "head", "delete", "copy"]
KINDS: tuple[Kind, ...] = ("get", "put", "list", "head", "delete", "copy")
#: Keys per page of a listing (ListObjectsV2) and per bulk delete (DeleteObjects).
PAGE = 1000
#: Names of files being written; never listed.
_PARTIAL = ".s3model-partial-"
#: Threads that do the disk work of writes (puts, copies, deletes): each one request's at a time.
SERVER_THREADS = 64
#: The kinds of request whose disk work runs in those threads rather than on the event loop.
_OFF_LOOP: frozenset[str] = frozenset({"put", "copy", "delete"})
_server = concurrent.futures.ThreadPoolExecutor(SERVER_THREADS, thread_name_prefix="s3model-server")


class _Stats:
    """Request and byte counts by kind, safe to update from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._bytes: dict[str, int] = dict.fromkeys(KINDS, 0)

    def add(self, kind: Kind, requests: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            self._requests[kind] += requests
            self._bytes[kind] += nbytes

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {"requests": dict(self._requests), "bytes": dict(self._bytes)}

    def reset(self) -> None:
        with self._lock:
            self._requests = dict.fromkeys(KINDS, 0)
            self._bytes = dict.fromkeys(KINDS, 0)


class _Link:
    """A shared link of ``total_bandwidth`` bytes/s: transfers take the next free slot, in order."""

    def __init__(self, total_bandwidth: float) -> None:
        self.total_bandwidth = total_bandwidth
        self._lock = threading.Lock()
        self._free_at = 0.0

    def reserve(self, nbytes: int, now: float) -> float:
        """The time the link has carried ``nbytes`` more, reserving that slot."""
        with self._lock:
            start = max(now, self._free_at)
            self._free_at = start + nbytes / self.total_bandwidth
            return self._free_at


class S3ModelFileSystem(AsyncFileSystem):
    """Objects in a local directory, each request paying a first-byte latency and a per-request bandwidth.

    Parameters
    ----------
    root
        The local directory that holds the buckets (its top-level directories).
        Required for any request; ``None`` lets fsspec spell URLs without one.
    latency
        Seconds before the first byte of every request.
    bandwidth
        Bytes per second of one request's payload.
    max_in_flight
        At most this many requests at once per instance and event loop; ``None``
        for no limit.
    total_bandwidth
        Bytes per second shared by all of this instance's transfers; ``None``
        for no limit.

    Examples
    --------
    >>> fs = S3ModelFileSystem(root=tmp, latency=0.0)  # doctest: +SKIP
    >>> fs.mkdir("bucket"); fs.pipe_file("bucket/a", b"abc"); fs.cat_file("bucket/a", start=1)  # doctest: +SKIP
    b'bc'
    """

    protocol = ("s3model",)
    root_marker = ""
    _stats: ClassVar[_Stats] = _Stats()

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        latency: float = 0.02,
        bandwidth: float = 100e6,
        max_in_flight: int | None = None,
        total_bandwidth: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if latency < 0:
            raise ValueError(f"Expected latency to be >= 0 seconds. Got {latency!r} instead.")
        if bandwidth <= 0:
            raise ValueError(f"Expected bandwidth to be > 0 bytes/s. Got {bandwidth!r} instead.")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"Expected max_in_flight to be None or >= 1. Got {max_in_flight!r} instead.")
        if total_bandwidth is not None and total_bandwidth <= 0:
            raise ValueError(f"Expected total_bandwidth to be None or > 0 bytes/s. Got {total_bandwidth!r} instead.")
        self.root = None if root is None else os.path.realpath(os.fspath(root))
        self.latency = float(latency)
        self.bandwidth = float(bandwidth)
        self.max_in_flight = max_in_flight
        self._link = None if total_bandwidth is None else _Link(float(total_bandwidth))
        # One semaphore per event loop: an asyncio primitive belongs to one loop.
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._slots_lock = threading.Lock()

    # Counters ---------------------------------------------------------------

    @classmethod
    def stats(cls) -> dict[str, dict[str, int]]:
        """Requests and bytes by kind since the last reset, over every instance in this process."""
        return cls._stats.snapshot()

    @classmethod
    def reset_stats(cls) -> None:
        """Set every count to zero."""
        cls._stats.reset()

    # Paths ------------------------------------------------------------------

    def _local(self, path: str) -> str:
        if self.root is None:
            raise ValueError(
                "Expected storage_options to name the local directory of the model's buckets, as "
                "{'root': '/some/dir'}. Got no root instead."
            )
        path = self._strip_protocol(path)
        parts = [part for part in path.split("/") if part]
        if any(part in (".", "..") for part in parts):
            raise ValueError(f"Expected a key without '.' or '..' components. Got {path!r} instead.")
        return os.path.join(self.root, *parts)

    def _bucket_local(self, path: str) -> str:
        bucket = self._strip_protocol(path).strip("/").split("/", 1)[0]
        return self._local(bucket)

    def _name(self, local: str) -> str:
        assert self.root is not None
        return os.path.relpath(local, self.root).replace(os.sep, "/")

    def _file_info(self, local: str, stat: os.stat_result | None = None) -> dict[str, Any]:
        stat = stat or os.stat(local)
        return {"name": self._name(local), "size": stat.st_size, "type": "file", "mtime": stat.st_mtime}

    def _dir_info(self, local: str) -> dict[str, Any]:
        return {"name": self._name(local), "size": 0, "type": "directory"}

    # The cost of a request --------------------------------------------------

    def _semaphore(self) -> asyncio.Semaphore | None:
        if self.max_in_flight is None:
            return None
        loop = asyncio.get_running_loop()
        with self._slots_lock:
            slot = self._slots.get(loop)
            if slot is None:
                slot = self._slots[loop] = asyncio.Semaphore(self.max_in_flight)
            return slot

    async def _request(self, kind: Kind, work: Any, nbytes: Any = 0, requests: Any = 1) -> Any:
        """Run ``work()`` as ``requests`` sequential requests of kind ``kind``; wait out their modelled time.

        ``nbytes`` (the payload) and ``requests`` are ints, or functions of the
        result: a get learns its size from the data it returns, a listing its
        number of pages from the keys it finds.
        """
        slot = self._semaphore()
        if slot is not None:
            await slot.acquire()
        try:
            began = time.monotonic()
            try:
                if kind in _OFF_LOOP:
                    result = await asyncio.get_running_loop().run_in_executor(_server, work)
                else:
                    result = work()
            except BaseException:
                self._stats.add(kind, 1)
                await _sleep_until(began + self.latency)
                raise
            size = int(nbytes(result) if callable(nbytes) else nbytes)
            if callable(requests):
                requests = int(requests(result))
            self._stats.add(kind, requests, size)
            deadline = began + requests * self.latency + size / self.bandwidth
            if self._link is not None and size:
                deadline = max(deadline, self._link.reserve(size, began + self.latency))
            await _sleep_until(deadline)
            return result
        finally:
            if slot is not None:
                slot.release()

    # Reads ------------------------------------------------------------------

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        local = self._local(path)

        def read() -> bytes:
            if os.path.isdir(local):
                raise FileNotFoundError(path)  # a prefix, not an object
            with open(local, "rb") as file:
                size = os.fstat(file.fileno()).st_size
                lo = 0 if start is None else (max(size + start, 0) if start < 0 else min(start, size))
                hi = size if end is None else (max(size + end, 0) if end < 0 else min(end, size))
                file.seek(lo)
                return file.read(max(hi - lo, 0))

        result: bytes = await self._request("get", read, len)
        return result

    async def _get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        data = await self._cat_file(rpath)
        if os.path.isdir(lpath):
            return
        with open(lpath, "wb") as file:
            file.write(data)

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        local = self._local(path)

        def head() -> dict[str, Any]:
            try:
                stat = os.stat(local)
            except FileNotFoundError:
                raise FileNotFoundError(path) from None
            if os.path.isdir(local):
                return self._dir_info(local)
            return self._file_info(local, stat)

        result: dict[str, Any] = await self._request("head", head)
        return result

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        local = self._local(path)

        def listing() -> list[dict[str, Any]]:
            if os.path.isfile(local):
                return [self._file_info(local)]
            try:
                entries = list(os.scandir(local))
            except (FileNotFoundError, NotADirectoryError):
                raise FileNotFoundError(path) from None
            out = []
            for entry in sorted(entries, key=lambda entry: entry.name):
                if entry.name.startswith(_PARTIAL):
                    continue
                if entry.is_dir():
                    out.append(self._dir_info(entry.path))
                else:
                    out.append(self._file_info(entry.path, entry.stat()))
            return out

        infos = await self._list(listing)
        return infos if detail else [info["name"] for info in infos]

    async def _list(self, listing: Any) -> Any:
        """One listing, charged one list request per page of results."""
        return await self._request("list", listing, requests=lambda infos: max(1, -(-len(infos) // PAGE)))

    async def _find(
        self, path: str, maxdepth: int | None = None, withdirs: bool = False, **kwargs: Any
    ) -> list[str] | dict[str, dict[str, Any]]:
        detail = kwargs.pop("detail", False)
        prefix = kwargs.pop("prefix", "")
        path = self._strip_protocol(path)
        local = self._local(path)
        base = path.strip("/")

        def walk() -> list[dict[str, Any]]:
            if os.path.isfile(local):
                return [self._file_info(local)]
            out: list[dict[str, Any]] = []
            for here, dirs, files in os.walk(local):
                depth = 0 if here == local else os.path.relpath(here, local).count(os.sep) + 1
                dirs.sort()
                if maxdepth is not None and depth + 1 >= maxdepth:
                    if depth + 1 > maxdepth:
                        dirs[:] = []
                        continue
                    if withdirs:
                        out.extend(self._dir_info(os.path.join(here, name)) for name in dirs)
                    dirs[:] = []
                elif withdirs:
                    out.extend(self._dir_info(os.path.join(here, name)) for name in dirs)
                out.extend(
                    self._file_info(os.path.join(here, name)) for name in sorted(files) if not name.startswith(_PARTIAL)
                )
            if prefix:
                start = f"{base}/{prefix}" if base else prefix
                out = [info for info in out if info["name"].startswith(start)]
            return out

        infos = await self._list(walk)
        found = {info["name"]: info for info in sorted(infos, key=lambda info: info["name"])}
        return found if detail else list(found)

    # Writes -----------------------------------------------------------------

    def _write(self, path: str, write: Any, mode: str = "overwrite") -> None:
        """Write an object atomically (a partial file, then a rename), as a put makes it appear whole."""
        local = self._local(path)
        if self._strip_protocol(path).strip("/").count("/") == 0:
            raise PermissionError(f"Expected a key inside a bucket. Got {path!r}, a bucket, instead.")
        if not os.path.isdir(self._bucket_local(path)):
            raise FileNotFoundError(f"Expected the bucket of {path!r} to exist. Got no such bucket instead.")
        if os.path.isdir(local):
            raise IsADirectoryError(path)
        if mode == "create" and os.path.exists(local):
            raise FileExistsError(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        partial = os.path.join(os.path.dirname(local), f"{_PARTIAL}{uuid.uuid4().hex}")
        try:
            write(partial)
            os.replace(partial, local)
        except BaseException:
            if os.path.exists(partial):
                os.remove(partial)
            raise

    async def _pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        data = bytes(value)

        def put() -> None:
            def write(partial: str) -> None:
                with open(partial, "wb") as file:
                    file.write(data)

            self._write(path, write, mode)

        await self._request("put", put, len(data))

    async def _put_file(self, lpath: str, rpath: str, mode: str = "overwrite", **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            return  # prefixes need no objects
        with open(lpath, "rb") as file:
            data = file.read()
        await self._pipe_file(rpath, data, mode=mode)

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        source = self._local(path1)

        def copy() -> None:
            if not os.path.isfile(source):
                raise FileNotFoundError(path1)
            self._write(path2, lambda partial: _server_side_copy(source, partial))

        await self._request("copy", copy)

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Create a bucket (a path of one component); below a bucket, nothing: prefixes are implicit."""
        path = self._strip_protocol(path).strip("/")
        if path and "/" not in path:
            local = self._local(path)
            if not os.path.isdir(local):
                await self._request("put", lambda: os.makedirs(local, exist_ok=True))

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        await self._mkdir(path)

    # Deletes ----------------------------------------------------------------

    def _delete(self, paths: Iterable[str]) -> None:
        """Remove objects, then the directories they leave empty (below their bucket)."""
        for path in paths:
            local = self._local(path)
            if os.path.isdir(local):
                continue  # a prefix: it goes with its last object
            try:
                os.remove(local)
            except FileNotFoundError:
                continue  # S3 answers a delete of a missing key with success
            bucket = self._bucket_local(path)
            parent = os.path.dirname(local)
            while parent != bucket and parent.startswith(bucket + os.sep):
                try:
                    os.rmdir(parent)
                except OSError:  # not empty, or gone already
                    break
                parent = os.path.dirname(parent)

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        await self._request("delete", lambda: self._delete([path]))

    async def _rm(
        self,
        path: str | list[str],
        recursive: bool = False,
        batch_size: int | None = None,
        maxdepth: int | None = None,
        **kwargs: Any,
    ) -> None:
        paths = await self._expand_path(path, recursive=recursive, maxdepth=maxdepth)
        keys = [key for key in paths if os.path.isfile(self._local(key))]
        pages = [keys[i : i + PAGE] for i in range(0, len(keys), PAGE)]
        await asyncio.gather(*(self._request("delete", lambda page=page: self._delete(page)) for page in pages))

    # Files ------------------------------------------------------------------

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | str | None = "default",
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> S3ModelFile:
        return S3ModelFile(
            self, path, mode, block_size=block_size, autocommit=autocommit, cache_options=cache_options, **kwargs
        )


class S3ModelFile(AbstractBufferedFile):
    """A file of the model: ranged gets when read, one put of the whole file when closed after writing."""

    fs: S3ModelFileSystem

    def __init__(self, fs: S3ModelFileSystem, path: str, mode: str = "rb", **kwargs: Any) -> None:
        if mode not in ("rb", "wb", "xb"):
            raise ValueError(f"Expected mode 'rb', 'wb' or 'xb' (objects cannot be appended to). Got {mode!r} instead.")
        self._put_mode = "create" if mode == "xb" else "overwrite"
        super().__init__(fs, path, "wb" if mode == "xb" else mode, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        data: bytes = sync(self.fs.loop, self.fs._cat_file, self.path, start=start, end=end)
        return data

    def _initiate_upload(self) -> None:
        pass

    def _upload_chunk(self, final: bool = False) -> bool:
        if not final:
            return False  # keep buffering: the object is put whole when the file closes
        sync(self.fs.loop, self.fs._pipe_file, self.path, self.buffer.getvalue(), mode=self._put_mode)
        return True


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


fsspec.register_implementation("s3model", S3ModelFileSystem, clobber=True)


def _server_side_copy(source: str, target: str) -> None:
    """A copy that costs the client no work, as S3's CopyObject: a hard link where the disk allows one.

    An object is never modified in place (a put writes a new file and renames
    it over the old one), so a link is as good as a copy of the bytes.
    """
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
