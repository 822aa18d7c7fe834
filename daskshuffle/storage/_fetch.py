"""Files and byte ranges fetched ahead of their reader, many requests in flight at once.

Object storage answers each request after tens of milliseconds but serves
thousands at once, so :class:`Fetches` starts every request of a read as soon
as the read is known and keeps what arrives until the read takes it.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from fsspec import AbstractFileSystem

from .._config import int_setting
from .._threads import LazyPool
from ._deadline import request_deadline, within

__all__ = ["Fetches", "Request", "fetched_each"]

T = TypeVar("T")

#: What is fetched: a whole file (its path), or bytes ``start:end`` of one, ``(path, start, end)`` (``None``: from
#: the start, to the end).
Request: TypeAlias = str | tuple[str, int | None, int | None]


@dataclass(slots=True)
class _Read:
    """The requests of one read not taken yet, and the bytes the read is expected to hold."""

    requests: set[Request]
    nbytes: int


class Fetches:
    """Files and byte ranges fetched ahead for reads named by keys; safe across threads, picklable (as empty).

    Requests go out in the order the reads were started, at most
    ``in_flight`` at once (``daskshuffle.config``'s ``fetch.in-flight``). A request that two reads make (a chunk across
    the boundary of two piles) is fetched once, and kept until both took it;
    a fetch taken with ``keep=True`` serves a read that asks for it later.

    Examples
    --------
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe({"/fetch-demo/a": b"alpha", "/fetch-demo/b": b"beta"})
    >>> fetches = Fetches(fs)
    >>> fetches.start("read-1", ["/fetch-demo/a", "/fetch-demo/b"], nbytes=9)
    True
    >>> fetches.take("read-1", "/fetch-demo/b").result(), fetches.nbytes
    (b'beta', 9)
    >>> fetches.take("read-1", "/fetch-demo/a").result(), fetches.nbytes
    (b'alpha', 0)
    >>> fetches.start("read-2", [("/fetch-demo/a", 1, 4)], nbytes=3)
    True
    >>> fetches.take("read-2", ("/fetch-demo/a", 1, 4)).result()
    b'lph'
    """

    def __init__(self, fs: AbstractFileSystem, in_flight: int | None = None, kept: int | None = None) -> None:
        self._fs = fs
        self._in_flight_limit = int_setting("fetch.in-flight") if in_flight is None else in_flight
        #: Bytes of files kept for reads still to come (``take(..., keep=True)``); past it the oldest go.
        self._kept_limit = int_setting("fetch.kept-nbytes") if kept is None else kept
        #: Fetches kept for reads still to come, oldest first, with their sizes once they landed.
        self._kept: OrderedDict[Request, tuple[Future[bytes], int]] = OrderedDict()
        #: Bytes of the files kept for reads still to come (those landed).
        self.kept_nbytes = 0
        self._reads: dict[Hashable, _Read] = {}
        self._files: dict[Request, tuple[Future[bytes], int]] = {}  # request: (its bytes, reads that will take them)
        #: Fetches a read took with ``keep=True`` while other reads still hold them: kept once the last lets go.
        self._keep: set[Request] = set()
        self._queue: deque[tuple[Request, Future[bytes]]] = deque()
        self._in_flight = 0
        self._lock = threading.Lock()
        # For a filesystem without an event loop of its own.
        self._pool = LazyPool(int_setting("fetch.threads"), "fetch")
        self._pumping = False  # a pump is scheduled on the filesystem's event loop, or running
        #: Bytes of the reads started and not yet wholly taken or dropped.
        self.nbytes = 0
        #: Seconds a request may go unanswered (on an asynchronous filesystem): from the filesystem's options.
        self.deadline = request_deadline(getattr(fs, "storage_options", None))
        #: The requests in flight on the filesystem's event loop, cancelled by :meth:`clear`.
        self._tasks: set[asyncio.Task[bytes] | Future[bytes]] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {"fs": self._fs, "in_flight": self._in_flight_limit, "kept": self._kept_limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._reads

    def start(self, key: Hashable, requests: Sequence[Request], nbytes: int) -> bool:
        """Start every request of ``requests`` (paths, or ``(path, start, end)``) for the read ``key``.

        ``False`` if the read is under way already.
        """
        with self._lock:
            if key in self._reads:
                return False
            unique = set(requests)
            for request in dict.fromkeys(requests):
                found = self._files.get(request)
                if found is None:
                    future = self._unkept(request)
                    if future is None:
                        future = Future()
                        self._queue.append((request, future))
                    self._files[request] = (future, 1)
                else:
                    self._files[request] = (found[0], found[1] + 1)
            self._reads[key] = _Read(unique, nbytes)
            self.nbytes += nbytes
        self._send()
        return True

    def take(self, key: Hashable, request: Request, keep: bool = False) -> Future[bytes] | None:
        """The fetch of ``request`` for the read ``key``, handed over once.

        With ``keep``, the fetch is also kept for the next read that asks for
        ``request``, from now on, landed or not; past ``kept`` bytes the oldest go. A read that was
        never started gets a fetch of ``request`` that another read started or
        that was kept, if there is one; otherwise, and for a request that the
        read did not make or took already, ``None``.
        """
        with self._lock:
            read = self._reads.get(key)
            if read is None:
                return self._shared(request, keep)
            if request not in read.requests:
                return None  # handed over already, or not one of this read's
            read.requests.discard(request)
            if keep:
                self._keep.add(request)  # kept once no read under way holds it (at once, if none does)
            future, kept = self._release(request)
            if not read.requests:
                self.nbytes -= self._reads.pop(key).nbytes
        if kept:  # outside the lock: a fetch landed already calls back at once, in this thread
            future.add_done_callback(functools.partial(self._kept_landed, request))
        return future

    def _kept_landed(self, request: Request, future: Future[bytes]) -> None:
        """Count a kept fetch's bytes once it landed (drop it if it failed), and hold to the limit."""
        with self._lock:
            if self._kept.get(request, (None, 0))[0] is not future:
                return  # taken (or dropped) before it landed
            if future.cancelled() or future.exception() is not None:
                del self._kept[request]
                return
            size = len(future.result())
            self._kept[request] = (future, size)
            self.kept_nbytes += size
            while self.kept_nbytes > self._kept_limit and self._kept:
                self.kept_nbytes -= self._kept.popitem(last=False)[1][1]

    def _shared(self, request: Request, keep: bool) -> Future[bytes] | None:
        """For a read never started: a fetch of ``request`` under way for another read, or kept. Under the lock."""
        under_way = self._files.get(request)
        if under_way is not None:
            return under_way[0]
        if not keep:
            return self._unkept(request)
        kept = self._kept.get(request)
        if kept is None:
            return None
        self._kept.move_to_end(request)  # still kept, as the newest
        return kept[0]

    def _unkept(self, request: Request) -> Future[bytes] | None:
        """The fetch kept for ``request``, no longer kept; ``None`` if there is none. Under the lock."""
        kept = self._kept.pop(request, None)
        if kept is None:
            return None
        self.kept_nbytes -= kept[1]
        return kept[0]

    def drop(self, key: Hashable) -> None:
        """Forget the read ``key``; requests that no other read needs are cancelled (a read that will not come)."""
        with self._lock:
            read = self._reads.pop(key, None)
            if read is None:
                return
            self.nbytes -= read.nbytes
            released = [(request, *self._release(request)) for request in read.requests]
        for request, future, kept in released:
            if kept:
                future.add_done_callback(functools.partial(self._kept_landed, request))
            elif request not in self._files:
                future.cancel()

    def clear(self) -> None:
        """Drop every read and every file kept, and stop the threads that fetch (if any).

        Nothing is sent after it: every fetch still queued is cancelled (taken,
        kept or not), and so is every request in flight on the filesystem's
        event loop (a stalled one is not waited for); one in a thread lands
        and is let go.
        """
        with self._lock:
            keys = list(self._reads)
            queued, self._queue = self._queue, deque()
            self._kept.clear()
            self._keep.clear()
            self.kept_nbytes = 0
        for key in keys:
            self.drop(key)
        for _, future in queued:
            future.cancel()
        if self._tasks:
            self._fs.loop.call_soon_threadsafe(self._cancel_tasks)
        self._pool.shutdown(wait=False)

    def _cancel_tasks(self) -> None:
        """On the event loop: cancel every request in flight."""
        for task in list(self._tasks):
            task.cancel()

    def _release(self, request: Request) -> tuple[Future[bytes], bool]:
        """One read lets go of ``request``'s fetch; whether that kept it (a read asked to keep it, none holds it now)."""
        future, readers = self._files[request]
        if readers > 1:
            self._files[request] = (future, readers - 1)
            return future, False
        del self._files[request]
        if request not in self._keep:
            return future, False
        self._keep.discard(request)
        self._kept[request] = (future, 0)
        return future, True

    def _send(self) -> None:
        """Send the queued requests that fit in flight, unless a pump is under way (it sends them).

        From the filesystem's event loop if it has one (one wake-up for all
        queued at once), else from this thread; each that lands sends the next.
        """
        with self._lock:
            if self._pumping or not self._queue:
                return
            self._pumping = True
        if getattr(self._fs, "async_impl", False):
            self._fs.loop.call_soon_threadsafe(self._pump)
        else:
            self._pump()

    def _next(self) -> tuple[Request, Future[bytes]] | None:
        """The next queued request that fits in flight, counted in flight; ``None`` if none does (the pump stops)."""
        with self._lock:
            while self._queue and self._in_flight < self._in_flight_limit:
                request, future = self._queue.popleft()
                if future.set_running_or_notify_cancel():  # else cancelled while queued
                    self._in_flight += 1
                    return request, future
            self._pumping = False
            return None

    def _pump(self) -> None:
        """Start each queued request that fits in flight: a task on the filesystem's event loop (run there), or of the pool."""
        while (sent := self._next()) is not None:
            request, future = sent
            path, start, end = (request, None, None) if isinstance(request, str) else request
            if getattr(self._fs, "async_impl", False):
                task: asyncio.Task[bytes] | Future[bytes] = self._fs.loop.create_task(self._fetch(path, start, end))
                self._tasks.add(task)
            else:
                task = self._pool.get().submit(self._fs.cat_file, path, start, end)
            task.add_done_callback(functools.partial(self._landed, future))

    async def _fetch(self, path: str, start: int | None, end: int | None) -> bytes:
        # The request's coroutine is made here, in its task: a task cancelled before it began leaves none unawaited.
        return await within(self._fs, self._fs._cat_file(path, start=start, end=end), self.deadline, path)

    def _landed(self, future: Future[bytes], task: asyncio.Task[bytes] | Future[bytes]) -> None:
        """On the event loop (or a thread of the pool): hand a request's bytes (or its error) over, and send the next."""
        self._tasks.discard(task)
        try:
            data = task.result()
        except BaseException as error:  # a cancelled request too: whoever waits learns of it
            future.set_exception(error)
        else:
            future.set_result(data)
        with self._lock:
            self._in_flight -= 1
            if self._pumping:
                return  # a pump is scheduled, or running
            self._pumping = True
        self._pump()

    def owns_thread(self) -> bool:
        """Whether the calling thread is one of those that fetch (for a filesystem without an event loop)."""
        return self._pool.owns()


def fetched_each(
    fs: AbstractFileSystem, requests: Sequence[Request], wait: Callable[[Future[bytes]], None] | None = None
) -> list[Any]:
    """The bytes of each of ``requests``, or the error its request raised: one batch of :class:`Fetches`.

    Each request fails within its own deadline (a batch of them takes no longer).
    ``wait`` is called with each fetch before its answer is taken, to wait
    otherwise (a read's wait, which a cancel ends); what is not taken then is cancelled.

    Examples
    --------
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe_file("/each-demo/a", b"0123456789")
    >>> fetched_each(fs, [("/each-demo/a", 6, None), "/each-demo/b"])
    [b'6789', FileNotFoundError('/each-demo/b')]
    """
    fetches = Fetches(fs)
    fetches.start("batch", requests, nbytes=0)
    found: dict[Request, Any] = {}
    try:
        for request in dict.fromkeys(requests):
            future = fetches.take("batch", request)
            assert future is not None  # every request of the batch is taken once
            if wait is not None:
                wait(future)
            try:
                found[request] = future.result()
            except Exception as error:  # handed over as it landed, as fsspec's on_error="return"
                found[request] = error
        return [found[request] for request in requests]
    finally:
        fetches.clear()
