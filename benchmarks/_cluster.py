"""What the benchmarks that start a LocalCluster share: a memory floor, and a loud stop when workers keep dying."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from dask.utils import format_bytes, parse_bytes

#: An idle worker with numpy, zarr, pandas and pyarrow loaded holds about 180 MiB: below this it does no work.
MIN_MEMORY_LIMIT = 512 * 2**20


def memory_limit_for(nbytes: int, given: str | None, fraction: int = 8) -> int:
    """A worker's memory limit: ``given``, or a ``fraction`` of the data, never below :data:`MIN_MEMORY_LIMIT`."""
    if given:
        limit = parse_bytes(given)
        if limit < MIN_MEMORY_LIMIT:
            sys.exit(
                f"--memory-limit {given} is below {format_bytes(MIN_MEMORY_LIMIT)}, what an idle worker holds: "
                "its nanny would restart it forever. Give at least that."
            )
        return limit
    return max(nbytes // fraction, MIN_MEMORY_LIMIT)


class RestartGuard:
    """Stop the benchmark, loudly, when the nanny has restarted workers ``limit`` times.

    A worker over its memory limit is killed and restarted by its nanny; a
    task that keeps killing workers fails after a few tries, but a worker that
    dies on its own (or between tasks) is restarted forever without an error.
    """

    def __init__(self, client: Any, memory_limit: int, limit: int = 8, interval: float = 0.5) -> None:
        self._client, self._memory_limit, self._limit, self._interval = client, memory_limit, limit, interval
        self._stop = threading.Event()
        self._seen: set[str] = set(client.scheduler_info()["workers"])
        self._first = len(self._seen)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._seen |= set(self._client.scheduler_info()["workers"])
            except Exception:  # the cluster is closing
                return
            restarts = len(self._seen) - self._first
            if restarts >= self._limit:
                print(
                    f"\nworkers were restarted {restarts} times (memory limit {format_bytes(self._memory_limit)} each): "
                    "stopping. Give the workers more memory with --memory-limit, or use smaller data.",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(3)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
