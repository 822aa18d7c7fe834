"""Reads that another thread may cancel: a loader's reads ahead that nobody waits for any more.

A read belongs to the thread that asked for it; a reader's ``cancel_reads`` ends
its wait for a fetch at once, stalled request or not, with
:class:`ReadCancelledError`: never damage, never a read again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, InvalidStateError, wait
from typing import Any

from .._threads import PickledEmpty

__all__ = ["CancellableRead", "ReadCancelledError", "ReadsUnderWay"]

#: The errors of a request that was cancelled (on the filesystem's event loop, or a thread's that had not begun it).
_CANCELS = (asyncio.CancelledError, CancelledError)


class ReadCancelledError(RuntimeError):
    """A read cancelled by ``PileReader.cancel_reads``; the loader raises a public error in its place."""


class CancellableRead:
    """A read that any thread may :meth:`cancel`: it then waits for no fetch, and raises :class:`ReadCancelledError`.

    Examples
    --------
    >>> from concurrent.futures import Future
    >>> read = CancellableRead()
    >>> read.cancel()
    >>> read.wait(Future(), "piles.zarr/x/c/0")  # a fetch that never lands
    Traceback (most recent call last):
    ...
    daskshuffle.readers._cancel.ReadCancelledError: The read of 'piles.zarr/x/c/0' was cancelled: ...
    """

    def __init__(self) -> None:
        self.owner = threading.current_thread().name
        self._stopped: Future[None] = Future()

    def cancel(self) -> None:
        """Stop the read: a wait for a fetch ends at once, and :meth:`check` raises."""
        with contextlib.suppress(InvalidStateError):  # cancelled already
            self._stopped.set_result(None)

    def check(self) -> None:
        """Raise :class:`ReadCancelledError` if the read was cancelled."""
        if self._stopped.done():
            raise ReadCancelledError("The read was cancelled: whoever asked for these rows has gone.")

    def wait(self, fetch: Future[Any], what: str) -> None:
        """Wait until ``fetch`` (of ``what``) lands, or raise :class:`ReadCancelledError` once either is cancelled."""
        wait([fetch, self._stopped], return_when=FIRST_COMPLETED)
        # A request cancelled on the event loop, or in a thread, hands its fetch the cancel as its error.
        if not fetch.done() or fetch.cancelled() or isinstance(fetch.exception(), _CANCELS):
            raise ReadCancelledError(f"The read of {what!r} was cancelled: whoever asked for these rows has gone.")


class ReadsUnderWay(PickledEmpty):
    """The reads of a reader under way, to cancel by the thread that started them.

    A pool of threads whose reads were cancelled (``cancel("<pool prefix>_")``)
    is done with: a read one of its threads begins afterwards, a job that had
    started just before the cancel, begins cancelled, rather than waiting on a
    stalled request while its pool is shut down.

    Examples
    --------
    >>> reads = ReadsUnderWay()
    >>> read = reads.begin()
    >>> reads.cancel("daskshuffle-read-7_")  # started by another thread: goes on
    >>> read.check()
    >>> reads.cancel()
    >>> read.check()
    Traceback (most recent call last):
    ...
    daskshuffle.readers._cancel.ReadCancelledError: The read was cancelled: whoever asked for these rows has gone.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reads: weakref.WeakSet[CancellableRead] = weakref.WeakSet()
        #: The pools (``"<prefix>_"``, as ``ThreadPoolExecutor`` names its threads) whose reads were cancelled, while
        #: one of their threads is alive.
        self._pools_done: set[str] = set()

    def begin(self) -> CancellableRead:
        """A read of the calling thread's, kept until it is gone (collected), to cancel."""
        read = CancellableRead()
        pool = read.owner.rpartition("_")[0] + "_"
        with self._lock:
            self._reads.add(read)
            if pool in self._pools_done:
                read.cancel()
        return read

    def cancel(self, threads: str | None = None) -> None:
        """Cancel the reads under way started by threads named ``threads...`` (every read by default)."""
        with self._lock:
            if threads is not None:
                # A pool none of whose threads is alive begins no read any more: its name goes.
                alive = {thread.name.rpartition("_")[0] + "_" for thread in threading.enumerate()}
                self._pools_done = {pool for pool in self._pools_done if pool in alive} | {threads}
            reads = [read for read in self._reads if threads is None or read.owner.startswith(threads)]
        for read in reads:
            read.cancel()
