"""The pools of threads daskshuffle starts, each named ``daskshuffle-<name>-<n>``, made when first needed.

Garbage collection may close a loader or a reader from one of its own threads: a pool is then shut
down without waiting for its threads (:meth:`LazyPool.owns`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["PREFIX", "LazyPool", "PickledEmpty", "release_on_collection"]

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
