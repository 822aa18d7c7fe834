"""Reading shuffled piles ahead of the consumer, in background threads.

A read is ``(epoch, pile, start, stop)``: positions ``start:stop`` of ``pile``
once shuffled for ``epoch``. :class:`ShuffledPiles` does one read (the pile's
rows as stored, and the order to hand them out in); :class:`Prefetcher` runs
reads on a small thread pool, ``depth`` of them ahead of the consumer.
Neither refers to the loader, so that garbage collection of the loader can
stop them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import count
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ._plan import pile_permutation
from .formats import PileReader

__all__ = ["Prefetcher", "Read", "ShuffledPile", "ShuffledPiles"]

_prefetcher_ids = count()
#: Every loader thread's name starts with this.
THREAD_PREFIX = "daskshuffle-loader"


class Read(NamedTuple):
    """Positions ``start:stop`` of ``pile`` once shuffled for ``epoch``: one background read."""

    epoch: int
    pile: int
    start: int
    stop: int


class ShuffledPile(NamedTuple):
    """A pile's rows as stored, the same rows as arrays (or ``None``), and the order to hand out positions in."""

    rows: Any
    arrays: dict[str, NDArray[Any]] | None
    order: NDArray[np.intp]


class ShuffledPiles:
    """Reads a pile and shuffles it for an epoch, through a thread-safe :class:`PileReader`."""

    def __init__(self, reader: PileReader[Any], store: str, seed: int) -> None:
        self.reader = reader
        self.store = store
        self.seed = seed
        self.offsets = reader.pile_offsets

    def read(self, job: Read) -> ShuffledPile:
        first, last = int(self.offsets[job.pile]), int(self.offsets[job.pile + 1])
        try:
            rows = self.reader.read_pile(job.pile)
            arrays = self.reader.as_arrays(rows)  # here, off the consumer's thread
        except Exception as error:
            error.add_note(
                f"daskshuffle was reading pile {job.pile} (rows {first}:{last}) of {self.store!r} for epoch {job.epoch}."
            )
            raise
        order = pile_permutation(self.seed, job.epoch, job.pile, last - first)[job.start : job.stop]
        return ShuffledPile(rows, arrays, order)


class Prefetcher:
    """Runs reads in background threads, ``depth`` of them ahead of the consumer.

    Futures, not queues: the consumer blocks only in ``Future.result()``, which
    also raises whatever went wrong in the background. ``depth`` threads read
    the next ``depth`` piles at once while the consumer uses one. ``close``
    cancels what has not started and joins the threads.
    """

    def __init__(self, read: Callable[[Read], Any], depth: int) -> None:
        self._read = read
        self._depth = depth
        self._prefix = f"{THREAD_PREFIX}-{next(_prefetcher_ids)}"
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[Read, Future[Any]] = {}
        self._lock = threading.Lock()

    def get(self, jobs: Sequence[Read], index: int) -> Any:
        """What ``jobs[index]`` reads, once the ``depth`` jobs after it are under way."""
        if self._depth == 0:
            return self._read(jobs[index])
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._depth, thread_name_prefix=self._prefix)
            for job in jobs[index : index + self._depth + 1]:
                if job not in self._pending:
                    self._pending[job] = self._executor.submit(self._read, job)
            future = self._pending.pop(jobs[index])
        return future.result()

    def keep_only(self, jobs: Sequence[Read]) -> None:
        """Cancel the reads under way that are not among ``jobs``."""
        with self._lock:
            for job in [job for job in self._pending if job not in jobs]:
                self._pending.pop(job).cancel()

    def close(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            executor, self._executor = self._executor, None
        for future in pending.values():
            future.cancel()
        if executor is not None:
            # A thread cannot join itself: if garbage collection closes us from
            # one of our own threads, let the threads finish on their own.
            wait = not threading.current_thread().name.startswith(self._prefix)
            executor.shutdown(wait=wait, cancel_futures=True)
