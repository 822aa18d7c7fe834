"""The pools of threads daskshuffle starts, each named ``daskshuffle-<name>-<n>``, made when first needed.

Garbage collection may close a loader or a reader from one of its own threads: a pool is then shut
down without waiting for its threads (:meth:`LazyPool.owns`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

__all__ = ["PREFIX", "LazyPool", "PickledEmpty", "each", "release_on_collection", "started_each"]

T = TypeVar("T")
R = TypeVar("R")

#: The first word of the name of every thread daskshuffle starts.
PREFIX = "daskshuffle"

_pool_ids = itertools.count()


def release_on_collection(release: Callable[..., Any], *args: Any) -> None:
    """Run ``release(*args)``, which garbage collection called (a ``weakref.finalize``), where it is safe to.

    Collection may run it in one of daskshuffle's threads, holding a lock the release takes or
    awaited by what it joins: there the release runs in a thread of its own; anywhere else, at once.
    """
    if threading.current_thread().name.startswith(PREFIX):
        threading.Thread(target=release, args=args, name=f"{PREFIX}-release", daemon=True).start()
    else:
        release(*args)


def started_each(function: Callable[[T], R], items: Iterable[T], threads: int = 16) -> list[Future[R]]:
    """``function(item)`` for each of ``items``, at most ``threads`` at a time; every call has ended when it returns.

    Requests to storage made this way wait out their round trips together rather than in turn. Interrupted, the
    calls not started are cancelled, and those under way end before the interrupt goes on: what they did is known.

    Examples
    --------
    >>> [future.exception() is None for future in started_each(lambda x: 1 // x, [1, 0, 2])]
    [True, False, True]
    """
    calls = [(item, Future[R]()) for item in items]
    futures = [future for _, future in calls]
    handing = threading.Lock()
    pending = iter(calls)

    def work() -> None:
        while True:
            with handing:
                call = next(pending, None)
            if call is None:
                return
            item, future = call
            if future.set_running_or_notify_cancel():  # not cancelled
                try:
                    future.set_result(function(item))
                except BaseException as error:  # even an interrupt raised by the call is its result
                    future.set_exception(error)

    try:
        for n in range(min(max(threads, 1), len(calls))):
            threading.Thread(target=work, name=f"{PREFIX}-each-{n}", daemon=True).start()
        wait(futures)
    except BaseException:
        # Every future is known here, even one whose thread was starting when the interrupt came.
        for future in futures:
            future.cancel()
        wait(futures)
        raise
    return futures


def each(function: Callable[[T], R], items: Iterable[T], threads: int = 16) -> list[R]:
    """The results of :func:`started_each`, in order: the first error in order raised, once every call has ended.

    Examples
    --------
    >>> each(abs, [-1, -2, 3])
    [1, 2, 3]
    """
    return [future.result() for future in started_each(function, items, threads)]


class LazyPool:
    """A pool of ``threads`` threads named ``daskshuffle-<name>-<n>``, made when first needed, again after :meth:`shutdown`.

    Examples
    --------
    >>> pool = LazyPool(2, "example")
    >>> list(pool.get().map(abs, [-1, -2, 3]))
    [1, 2, 3]
    >>> pool.shutdown()
    """

    def __init__(self, threads: int, name: str) -> None:
        self.threads = threads
        #: A name of its own: a thread of this pool is known by it.
        self.prefix = f"{PREFIX}-{name}-{next(_pool_ids)}"
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix=self.prefix)
            return self._executor

    def owns(self) -> bool:
        """Whether the calling thread is one of this pool's."""
        return threading.current_thread().name.startswith(self.prefix + "_")

    def shutdown(self, wait: bool = True) -> None:
        """Cancel what has not started; with ``wait``, join the threads, unless called from one of them."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait and not self.owns(), cancel_futures=True)


class PickledEmpty:
    """A base of what only this process holds (reads under way, a cache its threads share): a pickle carries none
    of it, and unpickling makes a new, empty one."""

    def __reduce__(self) -> tuple[type[Any], tuple[()]]:
        return type(self), ()
