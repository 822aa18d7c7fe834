"""Reading shuffled piles ahead of the consumer: between its batches, or in background threads.

A read is ``(epoch, pile, start, stop)``: positions ``start:stop`` of ``pile``
once shuffled for ``epoch``. A :class:`~daskshuffle.loader._reads.PileRead` does one read (the pile's rows
as stored, and the order to hand them out in); :class:`ReadThreads` keeps
``depth`` of them under way ahead of the consumer. Neither refers to the
loader, so that garbage collection of the loader can stop them.

Where a read runs depends on the consumer (:meth:`ReadThreads.back`). A
consumer that comes back for its next batch at once (a loop in Python, or a
GPU fed faster than it computes) reads the next pile itself when it needs it, like ``prefetch=0``: a background thread next to it waited for the GIL at
each of the ~40 file calls of a pile (up to ``sys.getswitchinterval()``
each), made the consumer wait for it in turn, and the consumer gathered from
memory written on the other core: half the rows per second of one thread for
twice the CPU. A consumer that stays away with each batch (a training step
outside Python) has the next piles read by background threads meanwhile, so
that it never waits for a read. So does every consumer of a store whose
reads are mostly decoding (:attr:`~daskshuffle.formats.PileReader.decodes`: a
Parquet store, a Zarr store whose rows are mostly compressed): the decoder
holds no GIL for milliseconds a pile (pyarrow) or tens of microseconds a chunk
(blosc), long enough that a thread beside even a fast consumer puts the second
core to work (``benchmarks/bench_reading_ahead.py``: Zarr token ids under
blosc-lz4 at 1.09 GB/s of rows rather than 0.88, a Parquet store of 65 columns
at 0.76M rows/s rather than 0.72M, medians of seven 1 GiB epochs). So does
every consumer of groups of units (:attr:`~daskshuffle.loader._read_units.ReadUnits.background`):
a group is a hundred chunk files or more whose reads and checks hold no GIL,
and its gather is long, so the two overlap. A loop in Python over a 1 GiB store
of 4 MiB piles read 13-16M rows/s rather than 10.7M; two such loops at once on
two cores, 19.7-20.0M in all rather than 20.1-20.5M (``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import count
from typing import Any, NamedTuple

from .._config import float_setting, int_setting
from .._parse import parse_count, parse_nbytes
from .._threads import PREFIX
from ..plan import BatchPlan
from ._batches import Allocate, gather_batches
from ._epoch_reads import Read
from ._reads import LoaderReads, PileRead

__all__ = [
    "FetchAhead",
    "Prefetch",
    "Read",
    "ReadThreads",
    "parse_prefetch",
    "prefetched_batches",
]

_read_threads_ids = count()
#: The weight of the last batch in the average time a consumer stays away with a batch.
AWAY_WEIGHT = 0.2
#: Every loader thread's name starts with this.
THREAD_PREFIX = f"{PREFIX}-loader"


class Prefetch(NamedTuple):
    """``PileLoader(prefetch=...)``: reads ahead, bytes of rows whose requests may be in flight, bytes a read ahead may hold."""

    depth: int
    in_flight: int
    held: int | None


def parse_prefetch(value: object) -> Prefetch:
    """``prefetch`` as the reads ahead, the bytes of rows in flight, and the bytes of a read started ahead.

    A number of reads keeps ``loader.read-ahead-nbytes`` (``daskshuffle.config``) of rows in flight on a remote
    store, whatever a read holds. A size is both budgets: requests in flight for that many bytes of rows, and one
    read ahead in memory if it holds no more (a pile, a group of units or an order's unit larger than the budget
    is read when the consumer gets to it).

    Examples
    --------
    >>> parse_prefetch(2), parse_prefetch("8MiB")
    (Prefetch(depth=2, in_flight=268435456, held=None), Prefetch(depth=1, in_flight=8388608, held=8388608))
    """
    if isinstance(value, str):
        nbytes = parse_nbytes(value, "prefetch")
        return Prefetch(1, nbytes, nbytes)
    depth = parse_count(value, "prefetch")
    return Prefetch(depth, int_setting("loader.read-ahead-nbytes") if depth else 0, None)


class FetchAhead:
    """Starts the requests of the reads after the consumer's, within ``piles.read_ahead`` bytes (remote stores).

    Independent of where reads run: the requests go out as soon as the
    consumer reaches a read (:meth:`advance`), for as many of the reads after
    it as the budget holds, and what arrives waits in the reader until its
    read takes it. The read under way counts against the budget too; the next
    read is always started, unless the budget is a size (``prefetch="8MiB"``).
    """

    def __init__(self, piles: LoaderReads) -> None:
        self._piles = piles
        self._started: dict[Read, list[tuple[int, int]]] = {}
        self._lock = threading.Lock()

    def advance(self, jobs: Sequence[Read], index: int) -> None:
        """The consumer reads ``jobs[index]``: start the reads after it that fit the budget."""
        reader, budget = self._piles.reader, self._piles.read_ahead
        with self._lock:
            # What was started is a run of reads from an earlier index on: those not ahead any more are done.
            ahead = set(jobs[index : index + len(self._started) + 1])
            self._forget([job for job in self._started if job not in ahead])
            for position, job in enumerate(jobs[index:]):
                if job in self._started:
                    continue
                # The read after the consumer's goes out whatever it holds, unless a size set the budget.
                if position > (0 if self._piles.held_ahead is not None else 1) and reader.fetched_nbytes >= budget:
                    break
                spans = self._piles.spans(job)
                for start, stop in spans:
                    reader.fetch(start, stop)
                self._started[job] = spans

    def close(self) -> None:
        with self._lock:
            self._forget(list(self._started))

    def _forget(self, jobs: list[Read]) -> None:
        """Drop what ``jobs`` fetched and did not read (a read that is done, or will not come)."""
        for job in jobs:
            for start, stop in self._started.pop(job):
                self._piles.reader.forget(start, stop)


class ReadThreads:
    """Keeps ``depth`` reads under way ahead of the consumer: read between its batches, or in background threads.

    The consumer tells it when it leaves with a batch (:meth:`leave`) and
    comes back (:meth:`back`); from how long it stays away, the next reads
    either wait to be read in :meth:`get`, or run in ``depth`` background threads (futures: whatever goes wrong there
    is raised in the consumer). :meth:`get` finishes a read in the consumer's
    thread where it can. ``close`` cancels what has not started and joins the
    threads.
    """

    def __init__(self, piles: LoaderReads, depth: int) -> None:
        self._make = piles.job
        self._reader = piles.reader
        self._depth = depth
        self._held_ahead = piles.held_ahead  # rows a read started ahead may hold, at most
        self._spans = piles.spans
        background = piles.background
        # On a remote store the requests of the reads ahead go out at once, whatever the depth.
        self._fetch = FetchAhead(piles) if piles.read_ahead > 0 else None
        self._background = background  # background threads read for every consumer
        self._prefix = f"{THREAD_PREFIX}-{next(_read_threads_ids)}"
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[Read, tuple[PileRead, Future[Any] | None]] = {}
        self._lock = threading.Lock()
        # Set while background threads may read: the consumer is away, waits for them, or has gone.
        self._away = threading.Event()
        self._away.set()
        self._overlap = background  # whether new reads go to background threads
        self._left_at = time.perf_counter()
        self._away_seconds = 0.0  # how long the consumer stays away with a batch, on average
        # A consumer away with each batch for longer than this on average has the next piles read in the background.
        self._away_limit = float_setting("loader.away-seconds")

    def get(self, jobs: Sequence[Read], index: int) -> Any:
        """What ``jobs[index]`` reads, once the ``depth`` jobs after it are under way."""
        if self._fetch is not None:
            self._fetch.advance(jobs, index)
        if self._depth == 0:
            return self._make(jobs[index])()
        with self._lock:
            for ahead, job in enumerate(jobs[index : index + self._depth + 1]):
                if job not in self._pending and (ahead == 0 or self._fits(job)):
                    self._pending[job] = self._submit(self._make(job))
            started, future = self._pending.pop(jobs[index])
        if future is None:
            return started()  # what is left of it, here
        if not future.done():
            if future.cancel():  # not started yet: read it here
                return started()
            finished = started.finish()
            # The background thread waits for this, to end this read or to start the next (until back()).
            self._away.set()
            if finished is not None:
                return finished
        return future.result()

    def _fits(self, job: Read) -> bool:
        """Whether ``job`` may be read ahead: it holds no more rows than a read ahead may (its runs, gaps and all)."""
        if self._held_ahead is None:
            return True
        return sum(stop - start for start, stop in self._spans(job)) <= self._held_ahead

    def _submit(self, started: PileRead) -> tuple[PileRead, Future[Any] | None]:
        if not self._overlap:
            # Read in get, just before its batches: a pile read earlier, between batches, was gathered from slower
            # (out of cache), and cost as much as it saved.
            return started, None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._depth, thread_name_prefix=self._prefix)
        return started, self._executor.submit(started, self._away)

    def enter(self) -> None:
        """The consumer starts gathering batches (after however long away)."""
        if not self._overlap:
            self._away.clear()

    def leave(self) -> None:
        """The consumer leaves with a batch."""
        self._left_at = time.perf_counter()
        if self._overlap and not self._away.is_set():  # set already for a consumer whose reads all run behind it
            self._away.set()

    def back(self) -> None:
        """The consumer is back for the next batch: choose where the next reads run.

        Background threads read only for a consumer away for longer than
        ``loader.away-seconds`` (``daskshuffle.config``) per batch on average, and only while it is away
        (see the module's docstring for why), unless the read_threads reads in
        the background for every consumer (``background``).
        """
        away = time.perf_counter() - self._left_at
        self._away_seconds += AWAY_WEIGHT * (away - self._away_seconds)
        self._overlap = self._background or self._away_seconds > self._away_limit
        if not self._overlap:
            self._away.clear()

    def keep_only(self, jobs: Sequence[Read]) -> None:
        """Cancel the reads under way that are not among ``jobs``."""
        with self._lock:
            for job in [job for job in self._pending if job not in jobs]:
                future = self._pending.pop(job)[1]
                if future is not None:
                    future.cancel()

    def close(self) -> None:
        self._away.set()  # no thread waits for a consumer that has gone
        with self._lock:
            pending, self._pending = self._pending, {}
            executor, self._executor = self._executor, None
        for _, future in pending.values():
            if future is not None:
                future.cancel()
        if executor is not None:
            # A read running for nobody (a group of units is a hundred files or more) stops after its file.
            self._reader.cancel_reads()
            # Garbage collection may close us from one of our own threads, or from one of the reader's (a decoder,
            # a fetch) that ours may be waiting for: then they finish on their own.
            inside = threading.current_thread().name.startswith(self._prefix) or self._reader.owns_thread()
            executor.shutdown(wait=not inside, cancel_futures=True)
        # Only then what was fetched ahead goes: a read still running takes its requests in flight, rather than
        # finding them cancelled and reading its files again one request after another.
        if self._fetch is not None:
            self._fetch.close()


def prefetched_batches(
    piles: LoaderReads,
    plan: BatchPlan,
    reads: list[Read],
    read_threads: ReadThreads,
    depth: int,
    allocate: Allocate | None = None,
    *,
    keep_open: bool = False,
) -> Generator[Any, None, None]:
    """The batches of ``plan``, its piles read through ``read_threads`` (``reads``: the plan's, then any to read ahead).

    The read_threads learns when the consumer leaves with a batch and comes
    back. It is closed when the batches end early (broken out of, closed, an
    error) and, unless ``keep_open`` (a loader's own iteration, whose reads
    ahead serve the next epoch), when they end.
    """
    read_threads.keep_only(reads[: depth + 1])
    finished = False
    read_threads.enter()
    try:
        batches = gather_batches(
            piles.reader, plan, lambda index: read_threads.get(reads, index), allocate, piles.release
        )
        for batch in batches:
            read_threads.leave()
            yield batch
            read_threads.back()
        finished = True
    finally:
        read_threads.leave()
        if not (finished and keep_open):
            read_threads.close()
