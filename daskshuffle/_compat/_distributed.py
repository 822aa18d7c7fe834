"""distributed's scheduler and worker internals: the comm handlers a scheduler runs, the tasks a worker runs.

- ``Server._comms`` (``distributed.core``), a dict of each open comm to the
  name of the handler serving it (``None`` between messages). A progress bar's
  ``feed`` handler learns that its bar has closed only at its next write; no
  public API says whether one still runs, and a cluster closed before it ends
  logs an error.
- ``Worker.state.tasks`` (``distributed.worker_state_machine.WorkerState``), a
  dict of each key to its ``TaskState``, whose ``key`` and ``state`` are the
  worker state machine's. A cancelled task that is running runs to its end; no
  public API says which tasks a worker still executes.

Checked against distributed 2026.8 (:data:`CHECKED`). The functions run where
the scheduler or the worker runs (``Client.run_on_scheduler``, ``Client.run``);
they import nothing.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

__all__ = ["CHECKED", "RUNNING_STATES", "running_handlers", "running_task_keys"]

#: The versions (major.minor) each function here was checked against.
CHECKED: dict[str, tuple[str, ...]] = {"distributed": ("2026.8",)}

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
