"""distributed's internals: the comm handlers a scheduler runs, the tasks a worker runs, its progress widget's listener.

- ``Server._comms``: each open comm's handler. No public API says whether a
  progress bar's ``feed`` still runs (a cluster closed before it ends logs an error).
- ``Worker.state.tasks``: each key's ``TaskState``. No public API says which
  tasks a worker still executes (a cancelled running task runs to its end).
- ``MultiProgressWidget.listen``: shown in a kernel, it is scheduled on the
  kernel's loop, which a cell waiting for the computation holds: never drawn.
  No public API starts it elsewhere.

Checked against distributed 2026.7, 2026.8 and 2026.11 (:data:`CHECKED`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from concurrent.futures import Future
from typing import Any

__all__ = ["CHECKED", "draw_from_client_loop", "running_handlers", "running_task_keys"]

#: The versions (major.minor) each function here was checked against.
CHECKED: dict[str, tuple[str, ...]] = {"distributed": ("2026.7", "2026.8", "2026.11")}

#: The states of a worker's task whose function is still running: cancelled or
#: resumed tasks included, since a thread cannot be stopped.
RUNNING_STATES = frozenset({"executing", "long-running", "cancelled", "resumed"})


def running_handlers(dask_scheduler: Any, op: str) -> int:
    """The number of ``op`` handlers (``"feed"``, ``"register-client"``, ...) a scheduler runs now.

    Parameters
    ----------
    dask_scheduler
        A ``distributed.Scheduler``; named as ``Client.run_on_scheduler``
        names the argument it passes the scheduler in.
    op
        The name of a scheduler handler.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, Client(cluster) as client:
    ...     client.run_on_scheduler(running_handlers, op="register-client")
    1
    """
    return sum(name == op for name in getattr(dask_scheduler, "_comms", {}).values())


def running_task_keys(dask_worker: Any) -> list[Hashable]:
    """The keys of the tasks whose function a worker is running, in any of :data:`RUNNING_STATES`.

    Parameters
    ----------
    dask_worker
        A ``distributed.Worker``; named as ``Client.run`` names the argument
        it passes the worker in.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, Client(cluster) as client:
    ...     list(client.run(running_task_keys).values())  # nothing submitted: nothing runs
    [[]]
    """
    return [task.key for task in dask_worker.state.tasks.values() if task.state in RUNNING_STATES]


def draw_from_client_loop(bar: Any, client: Any) -> tuple[Any, Future[None]]:
    """Start ``bar``, distributed's progress widget, on the event loop of ``client``; the widget to show.

    The client's loop runs in a thread of its own, so the widget moves while the
    calling thread waits for the computation, as a cell does.

    Parameters
    ----------
    bar
        What ``distributed.progress(..., notebook=True)`` returns, not yet shown.
    client
        A synchronous ``distributed.Client``, of the scheduler ``bar`` watches.

    Returns
    -------
    widget
        The ``ipywidgets`` box to display: a bar per kind of task, and the time.
    drawn
        Done when the bar has drawn its last state (or failed to reach the scheduler).

    Examples
    --------
    >>> from distributed import Client, LocalCluster, progress
    >>> with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, Client(cluster) as client:
    ...     future = client.submit(sum, [1, 2])
    ...     bar = progress(future, notebook=True, scheduler=client.scheduler.address)
    ...     widget, drawn = draw_from_client_loop(bar, client)
    ...     future.result(), drawn.result(timeout=10)
    (3, None)
    """
    return bar.widget, asyncio.run_coroutine_threadsafe(bar.listen(), client.loop.asyncio_loop)
