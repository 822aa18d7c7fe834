"""distributed's internals: the comm handlers a scheduler runs, the tasks a worker runs, its progress widget's listener.

- ``Server._comms`` (``distributed.core``), a dict of each open comm to the
  name of the handler serving it (``None`` between messages). A progress bar's
  ``feed`` handler learns that its bar has closed only at its next write; no
  public API says whether one still runs, and a cluster closed before it ends
  logs an error.
- ``Worker.state.tasks`` (``distributed.worker_state_machine.WorkerState``), a
  dict of each key to its ``TaskState``, whose ``key`` and ``state`` are the
  worker state machine's. A cancelled task that is running runs to its end; no
  public API says which tasks a worker still executes.
- ``MultiProgressWidget`` (``distributed.diagnostics.progressbar``), the object
  ``distributed.progress`` returns in a kernel: its coroutine ``listen`` reads
  the scheduler's feed and draws, its ``widget`` is what a cell shows. Shown,
  it schedules ``listen`` on the event loop of the calling thread
  (``IOLoop.current()``), in a kernel the kernel's own, which a cell waiting
  for the computation holds until the cell ends: the box is shown and never
  drawn. No public API starts it elsewhere.

Checked against distributed 2026.7 and 2026.8 (:data:`CHECKED`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from concurrent.futures import Future
from typing import Any

__all__ = ["CHECKED", "draw_from_client_loop", "running_handlers", "running_task_keys"]

#: The versions (major.minor) each function here was checked against.
CHECKED: dict[str, tuple[str, ...]] = {"distributed": ("2026.7", "2026.8")}

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
