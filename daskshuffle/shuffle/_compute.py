"""Running task graphs on the active scheduler (a distributed client if there is one, else threads of its own).

With ``_graph.py``, the only module that imports dask. A failed run stops what is
queued and waits for what runs, so that its caller cleans up behind no writer.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import dask
from dask.base import tokenize
from dask.delayed import Delayed
from dask.system import CPU_COUNT
from dask.utils import format_time

from .._compat import draw_from_client_loop, running_handlers, running_task_keys
from .._config import int_setting
from .._errors import NoWorkersError

__all__ = [
    "compute",
    "map_tasks",
    "on_every_worker",
    "workers_not_seeing",
]

#: The width of dask's and distributed's text bars, which the final line matches.
_BAR_WIDTH = 40


def map_tasks(
    func: Callable[..., Any],
    args: Sequence[tuple[Any, ...]],
    *,
    token: str,
    progress: bool = False,
    inputs: tuple[Mapping[Any, Any], Sequence[Any]] | None = None,
) -> list[Any]:
    """``[func(*a) for a in args]``, one task each, run in parallel on the active scheduler.

    With ``inputs`` (a dask collection's graph and one key per task), each task
    also receives the computed value of its key, last.
    """
    name = "daskshuffle-map-" + tokenize(token, args)
    graph: dict[Any, Any] = {(name, index): (func, *item) for index, item in enumerate(args)}
    if inputs is not None:
        input_graph, keys = inputs
        name += "-" + tokenize(list(keys))
        graph = {(name, index): (func, *item, key) for index, (item, key) in enumerate(zip(args, keys, strict=True))}
        graph.update(input_graph)
    graph[name] = (list, [(name, index) for index in range(len(args))])
    return list(compute(graph, name, progress=progress))


def _distributed_client() -> Any:
    """The current ``distributed.Client``, if any, unless dask is configured to use another scheduler."""
    try:
        from distributed import Client
    except ImportError:  # the threaded scheduler needs no distributed
        return None
    if dask.config.get("scheduler", None) not in (None, "dask.distributed", "distributed"):
        return None
    try:
        return Client.current(allow_global=True)
    except ValueError:
        return None


def workers_not_seeing(directory: str) -> list[str]:
    """The workers of the active cluster that do not see the local ``directory`` as this process sees it.

    A probe file made here is looked for on every worker: a directory of the
    same name on another machine (``/tmp``) is not enough. Without a cluster, nothing is probed.
    """
    if _distributed_client() is None:
        return []
    probe = os.path.join(directory, f".daskshuffle-probe-{uuid.uuid4().hex}")
    try:
        with open(probe, "x"):
            pass
    except OSError:
        return []
    try:
        seen = on_every_worker(os.path.exists, probe)
    finally:
        os.remove(probe)
    return sorted(str(worker) for worker, found in seen.items() if not found)


def _in_kernel() -> bool:
    """Whether this is a Jupyter kernel (where a widget can be shown), not a plain or IPython process."""
    ipython = sys.modules.get("IPython")  # imported already if this is a kernel
    return ipython is not None and getattr(ipython.get_ipython(), "kernel", None) is not None


def on_every_worker(func: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """``func(*args)`` as a task on each worker of the active cluster, by worker address; ``{}`` without one.

    Tasks, not ``Client.run``: ``func`` may wait for storage, which must not block a worker's event loop.
    """
    client = _distributed_client()
    if client is None:
        return {}
    workers = sorted(live_workers(client))
    key = f"daskshuffle-on-worker-{uuid.uuid4().hex}"
    futures = [
        client.submit(func, *args, key=f"{key}-{index}", workers=[worker], allow_other_workers=False, pure=False)
        for index, worker in enumerate(workers)
    ]
    return dict(zip(workers, client.gather(futures), strict=True))


def _interactive() -> bool:
    """Whether a bar redrawn in place reaches a person (a terminal or a Jupyter kernel), not a log."""
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty is not None and isatty()) or _in_kernel()


def _report_finished(began: float) -> None:
    """The last state of the bar, printed once: what a log, or a saved notebook, keeps of it."""
    print(f"[{'#' * _BAR_WIDTH}] | 100% Completed | {format_time(time.perf_counter() - began)}", flush=True)


#: How long a finished computation's bar may take to draw its last state (it draws every 0.1 s).
_LAST_DRAW_TIMEOUT = 2.0


def _show_progress(future: Any) -> None:
    """Wait for ``future``, behind distributed's live bar where a person watches (a widget in a kernel, text
    elsewhere), then print the bar's last state as a line."""
    from distributed import progress, wait

    began = time.perf_counter()
    client = future.client
    scheduler = client.scheduler.address  # the future's, whether or not its client is the default one
    if not _interactive():
        wait(future)
    else:
        before = _feeds_running(client)
        bar = None
        if _in_kernel():
            with suppress(ImportError):  # a notebook without ipywidgets: a text bar instead of a widget
                bar = progress(future, notebook=True, scheduler=scheduler)
        if bar is None:
            progress(future, notebook=False, scheduler=scheduler)  # waits, drawing in a thread of its own
            # The bar ends when the scheduler has every key; this client may hear of its own future a moment later.
            wait(future)
        else:
            from IPython.display import display

            widget, drawn = draw_from_client_loop(bar, client)
            display(widget)  # type: ignore[no-untyped-call]
            wait(future)
            # The bar is decoration: one that cannot reach the scheduler, or is late, leaves the result as it is.
            with suppress(Exception):
                drawn.result(timeout=_LAST_DRAW_TIMEOUT)
        if future.done():  # a bar, finished: let the scheduler end the feed that drew it
            # A finished bar's feed learns of it at its next write; a cluster closed before then logs a traceback.
            _poll(lambda: _feeds_running(client) <= before, timeout=2.0, interval=0.02)
    if future.status == "finished":  # an error is the caller's to raise, without a line of success
        _report_finished(began)


def _feeds_running(client: Any) -> int:
    """The scheduler's ``feed`` handlers still running (a progress bar's is one)."""
    try:
        return int(client.run_on_scheduler(running_handlers, op="feed"))
    except Exception:  # a scheduler that cannot say: nothing to wait for
        return 0


def _poll(done: Callable[[], bool], *, timeout: float, interval: float) -> None:
    """Ask ``done`` every ``interval`` seconds until it says yes, for at most ``timeout`` seconds.

    What it waits for happens in other processes (the scheduler, the workers), which send no word of it.
    """
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(interval)


def compute(graph: dict[Any, Any], key: str, *, progress: bool = False, remote: bool = False) -> Any:
    """Run ``graph`` to ``key`` on the active scheduler, with an optional progress bar.

    Without a distributed client, on threads of this process: one a core, or
    ``shuffle.remote-threads`` when ``remote`` (tasks that mostly wait for an object store).
    """
    client = _distributed_client()
    if client is not None:
        workers = live_workers(client)
        future = client.compute(Delayed(key, _scattered(client, graph)))
        try:
            if progress:
                _show_progress(future)
            return future.result()
        except BaseException as error:
            # Stop what is still queued, and wait for what is running, before the caller cleans up behind it.
            client.cancel(future)
            _poll(lambda: _stopped(client, key.removesuffix("-done")), timeout=STOP_TIMEOUT, interval=0.05)
            if isinstance(error, KeyboardInterrupt) and not str(error):
                raise KeyboardInterrupt(_workers_after_interrupt(client, workers)) from error
            raise
    result = Delayed(key, graph)
    if dask.config.get("scheduler", None) not in (None, "threads", "threading"):
        return _compute_locally(result, progress)  # the scheduler the caller configured
    # Threads of our own, joined before returning: no task may still write while the caller removes the pieces.
    threads = max(CPU_COUNT, int_setting("shuffle.remote-threads")) if remote else CPU_COUNT
    with ThreadPoolExecutor(threads, thread_name_prefix="daskshuffle") as pool:
        try:
            return _compute_locally(result, progress, scheduler="threads", pool=pool)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


#: A value in a graph at least this large (a pandas DataFrame's block) is sent to the workers ahead of the graph.
SCATTER_NBYTES = 1 << 20


def _scattered(client: Any, graph: dict[Any, Any]) -> dict[Any, Any]:
    """``graph`` with its large literal values scattered to the workers, as distributed recommends."""
    from dask.sizeof import sizeof

    data = {
        key: value
        for key, value in graph.items()
        if not (isinstance(value, tuple) and value and callable(value[0])) and sizeof(value) >= SCATTER_NBYTES
    }
    if not data:
        return graph
    futures = client.scatter(list(data.values()), hash=False)
    return {**graph, **dict(zip(data, futures, strict=True))}


#: What to do when the cluster's workers are gone, in a notebook or anywhere.
_START_WORKERS = "start new ones (client.close(); client = Client(), or restart the cluster)"


def live_workers(client: Any) -> set[str]:
    """The workers of ``client``'s cluster; :class:`NoWorkersError` when there are none.

    Tasks on a cluster without workers wait forever (an interrupt in a notebook
    stops a ``LocalCluster``'s workers and leaves its scheduler).
    """
    workers = set(client.nthreads())
    if not workers:
        raise NoWorkersError(
            f"Expected the cluster at {client.scheduler.address} to have workers to run the tasks. Got none instead: "
            "they are gone (in a notebook, an interrupt stops the workers of the LocalCluster that Client() "
            f"started). To run it, {_START_WORKERS}; a shuffle continues what an interrupted one left."
        )
    return workers


#: How long an interrupted run waits to learn whether the interrupt stopped the cluster's workers too.
_WORKERS_GONE_TIMEOUT = 2.0


def _workers_left(client: Any, before: set[str]) -> set[str]:
    try:
        return before & set(client.nthreads())
    except OSError:  # the scheduler went too
        return set()


def _workers_after_interrupt(client: Any, before: set[str]) -> str:
    """Whether an interrupt (which reaches the whole process group) took the cluster's workers with it."""
    _poll(lambda: not _workers_left(client, before), timeout=_WORKERS_GONE_TIMEOUT, interval=0.05)
    left = _workers_left(client, before)
    if left == before:
        return "The cluster's workers are still running."
    stopped = f"all {len(before)}" if not left else f"{len(before) - len(left)} of the {len(before)}"
    return (
        f"The interrupt also stopped {stopped} of the cluster's workers (it reaches every process of the kernel's or "
        f"terminal's process group, the workers of a LocalCluster started there among them): {_START_WORKERS} before "
        "running it again."
    )


#: How long a failed run waits for its cancelled tasks that are still running to stop.
STOP_TIMEOUT = 300.0


def _running_tasks(prefix: str, dask_worker: Any) -> int:
    """The tasks of the graph named ``prefix`` that a worker is still running (cancelled ones included)."""
    keys = [key[0] if isinstance(key, tuple) else key for key in running_task_keys(dask_worker)]
    return sum(str(key).startswith(prefix) for key in keys)


def _stopped(client: Any, prefix: str) -> bool:
    """Whether no worker runs a task of the graph named ``prefix``: a cancelled task that runs runs to its end,
    and removing the pieces while it still writes would let it write them again."""
    try:
        # The workers the scheduler still knows: ``run`` would wait for one that just died until its timeout.
        workers = list(client.nthreads())
        return not workers or not any(client.run(_running_tasks, prefix, workers=workers, on_error="ignore").values())
    except OSError:  # the cluster itself is gone: nothing runs there any more
        return True


def _compute_locally(result: Delayed, progress: bool, **options: Any) -> Any:
    if not progress:
        return result.compute(**options)
    if _interactive():
        from dask.diagnostics.progress import ProgressBar

        with ProgressBar():
            return result.compute(**options)
    began = time.perf_counter()
    value = result.compute(**options)
    _report_finished(began)
    return value
