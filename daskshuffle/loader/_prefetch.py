"""Reading ahead of the consumer: one pool of reader threads under one byte budget (:class:`ReadAhead`).

Nothing here refers to the loader, so that garbage collection of the loader can stop the reads.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Generator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from itertools import count
from typing import Any, NamedTuple

from .._config import int_setting
from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import size_in_bytes
from .._threads import PREFIX
from ..epochs import BatchPlan
from ..readers import ReadCancelledError
from ._batches import Allocate, gather_batches
from ._epoch_reads import Read
from ._reads import LoaderReads, ShuffledPile

__all__ = ["Read", "ReadAhead", "parse_prefetch", "prefetched_batches"]

_read_ahead_ids = count()
THREAD_PREFIX = f"{PREFIX}-loader"
#: Reader threads of a loader (or of a lane): reads run in the order the consumer needs them.
READ_THREADS = 1


#: A size of nothing, ``"0B"`` or ``"0MiB"``: no reads ahead (a size elsewhere must be positive).
_NOTHING = re.compile(r"^\s*0+(\.0*)?\s*[A-Za-z]*\s*$")


class Prefetch(NamedTuple):
    """``PileLoader(prefetch=...)``: bytes of rows in flight, and of rows read ahead (``None``: one read)."""

    in_flight: int
    held: int | None


def parse_prefetch(value: object) -> Prefetch:
    """``PileLoader(prefetch=)`` (documented there) as the bytes of rows in flight and of rows read ahead.

    Examples
    --------
    >>> parse_prefetch("auto"), parse_prefetch("8MiB"), parse_prefetch("0B")
    (Prefetch(in_flight=268435456, held=None), Prefetch(in_flight=8388608, held=8388608), Prefetch(in_flight=0, held=0))
    """
    if value == "auto":
        return Prefetch(int_setting("loader.read-ahead-nbytes"), None)
    expected = f"Expected prefetch to be a size such as '512MiB', or 'auto'. Got {value!r} instead"
    if not isinstance(value, str):
        raise DaskShuffleTypeError(
            f"{expected}; prefetch is the bytes of rows read ahead of the consumer, not a number of reads.",
            parameter="prefetch",
        )
    if _NOTHING.match(value):
        return Prefetch(0, 0)
    try:
        nbytes = size_in_bytes(value)
    except ValueError as error:
        raise DaskShuffleValueError(f"{expected}.", parameter="prefetch") from error
    return Prefetch(nbytes, nbytes)


def _ahead(jobs: Sequence[Read], index: int) -> Sequence[Read]:
    """The consumer's read ``jobs[index]`` and those after it that may be read or fetched ahead: of a later epoch only
    the first, as the consumer may never iterate it (then each of its requests is one too many)."""
    later = bisect.bisect_right(jobs, jobs[index].epoch, lo=index, key=lambda job: job.epoch)  # epochs in order
    return jobs[index : later + 1]


class ReadAhead:
    """One pool of reader threads: the consumer's read, and the reads after it that fit the budget.

    On a remote store the requests of the reads after the consumer's go out at
    once, within ``piles.read_ahead`` bytes: the read under way counts against
    it; the next read is always started, unless the budget is a size
    (``prefetch="8MiB"``). :meth:`close` cancels what has not started, stops
    the reads under way and joins the threads; :meth:`get` may start them
    again until the loader closes.
    """

    def __init__(self, piles: LoaderReads, closes: int) -> None:
        self._piles = piles
        self._reader = piles.reader
        self._closes = closes
        #: The spans of the reads whose requests went out ahead (``None``: none go out ahead).
        self._fetched: dict[Read, list[tuple[int, int]]] | None = {} if piles.read_ahead > 0 else None
        self._fetch_lock = threading.Lock()
        self._prefix = ""  # the pool's, named anew each time one is made
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[Read, Future[ShuffledPile]] = {}
        self._lock = threading.Lock()
        piles.opened(self)

    @property
    def stale(self) -> bool:
        """Whether the loader closed since the iteration this serves began: it starts nothing any more."""
        return self._piles.closes != self._closes

    def get(self, jobs: Sequence[Read], index: int) -> ShuffledPile:
        """What ``jobs[index]`` reads, once the jobs after it that fit the budget are under way."""
        self._fetch_ahead(jobs, index)
        limit = self._piles.held_ahead
        with self._lock:
            # Under the lock close() takes after counting the close: what is submitted here, it then stops.
            if self.stale:
                raise _stopped()
            held = 0
            for ahead, job in enumerate(_ahead(jobs, index)[: 2 if limit is None else None]):
                if ahead and limit is not None:  # the rows of the reads ahead, their runs' gaps and all
                    held += sum(stop - start for start, stop in self._piles.epoch_reads.spans(job))
                    if held > limit:
                        break
                if job not in self._pending:
                    if self._executor is None:  # a pool of its own name each time: a closed pool's reads stay cancelled
                        self._prefix = f"{THREAD_PREFIX}-{next(_read_ahead_ids)}"
                        self._executor = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix=self._prefix)
                    self._pending[job] = self._executor.submit(self._piles.read, job)
            future = self._pending.pop(jobs[index])
        try:
            return future.result()
        except (CancelledError, ReadCancelledError):
            # Only close() cancels our reads: another thread closed this one's while it waited. A public error.
            raise _stopped() from None

    def keep_only(self, jobs: Sequence[Read]) -> None:
        """Cancel the reads not started that are not among ``jobs``."""
        wanted = set(jobs)
        with self._lock:
            for job in [job for job in self._pending if job not in wanted]:
                self._pending.pop(job).cancel()

    def close(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            executor, self._executor = self._executor, None
            prefix = self._prefix
        for future in pending.values():
            future.cancel()
        if executor is not None:
            self._reader.cancel_reads(prefix + "_")  # ours only: other iterations' and ranges' reads go on
            # Garbage collection may close us from one of our threads or the reader's: they then finish on their own.
            inside = threading.current_thread().name.startswith(prefix) or self._reader.owns_thread()
            executor.shutdown(wait=not inside, cancel_futures=True)
        # Only then what was fetched ahead goes: a read still running takes its requests in flight.
        if self._fetched is not None:
            with self._fetch_lock:
                self._forget(list(self._fetched))

    def _fetch_ahead(self, jobs: Sequence[Read], index: int) -> None:
        """The consumer reads ``jobs[index]``: start the requests of the reads after it that fit (none once closed)."""
        started, reader, budget = self._fetched, self._reader, self._piles.read_ahead
        if started is None:
            return
        with self._fetch_lock:
            if self.stale:  # its close() waits for this lock, then forgets what was started
                return
            # What was started is a run of reads from an earlier index on: those not ahead any more are done.
            ahead = set(jobs[index : index + len(started) + 1])
            self._forget([job for job in started if job not in ahead])
            for position, job in enumerate(_ahead(jobs, index)):
                if job in started:
                    continue
                # The read after the consumer's goes out whatever it holds, unless a size set the budget.
                if position > (0 if self._piles.held_ahead is not None else 1) and reader.fetched_nbytes >= budget:
                    break
                spans = self._piles.epoch_reads.spans(job)
                for start, stop in spans:
                    reader.fetch(start, stop, job)
                started[job] = spans

    def _forget(self, jobs: list[Read]) -> None:  # with _fetch_lock held
        assert self._fetched is not None
        for job in jobs:
            for start, stop in self._fetched.pop(job):
                self._reader.forget(start, stop, job)


def _stopped() -> DaskShuffleValueError:
    return DaskShuffleValueError(
        "Expected the reads of an open iteration to go on. Got them stopped instead: the loader was closed, or "
        "another thread's iteration replaced this one (one consumer per PileLoader); give each thread its own "
        "PileLoader, or read ranges with iter_batches(epoch, start, stop)."
    )


def prefetched_batches(
    piles: LoaderReads,
    plan: BatchPlan,
    reads: list[Read],
    read_ahead: ReadAhead,
    allocate: Allocate | None = None,
    *,
    keep_open: bool = False,
) -> Generator[Any, None, None]:
    """The batches of ``plan``, its ``reads`` (then any to read ahead) through ``read_ahead``.

    ``read_ahead`` is closed when the batches end, unless they end whole and ``keep_open``.
    """
    read_ahead.keep_only(reads)
    finished = False
    try:
        yield from gather_batches(
            piles.reader.rows, plan, lambda index: read_ahead.get(reads, index), allocate, piles.release
        )
        finished = True
    finally:
        if not (finished and keep_open):
            read_ahead.close()
