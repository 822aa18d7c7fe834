"""Reads of a Zarr pile store's rows that several threads share, and a reader's own pool of threads.

A read is a list of tasks, each the chunk files of one variable that hold some
of its rows (:class:`~daskshuffle.readers._zarr_chunks.ChunkFiles` reads them).
Any thread may take a task: the one that started the read, or a reader's pool.
"""

from __future__ import annotations

import threading
from typing import Any

from numpy.typing import NDArray

from ..formats import ArrayRows
from ._pile_reader import ReadCancelledError
from ._zarr_chunks import ChunkFiles, Chunks

__all__ = ["RowsRead", "Task"]


#: The chunks ``first:last`` of a variable that hold some of store rows ``start:stop``, read into ``out`` (those
#: rows' array): ``(chunks, out, first, last, start, stop)``.
Task = tuple[Chunks, NDArray[Any], int, int, int, int]


class RowsRead:
    """Rows being read by tasks (chunk files of a variable, for a run of rows) that any thread may run.

    The thread that started the read runs them in :meth:`result`; so may a
    reader's pool (:meth:`help`). Each task is taken
    once, under a lock (``next`` of an ``itertools.count`` is atomic only
    under the GIL, not on free-threaded Python); an error is kept and raised
    by :meth:`result` once no task runs, since every task writes into the
    rows.
    """

    def __init__(self, files: ChunkFiles, rows: ArrayRows, tasks: list[Task], pile: int | None) -> None:
        self.rows = rows
        #: The name of the thread that started the read: :meth:`ZarrPileReader.cancel_reads` cancels by it.
        self.owner = threading.current_thread().name
        self._files = files
        self._tasks = tasks
        self._pile = pile
        self._taken = 0  # the next task to take
        self._taking = threading.Lock()
        self._left = len(tasks)
        self._finished = threading.Condition()
        self._errors: list[BaseException] = []

    @property
    def n_tasks(self) -> int:
        return len(self._tasks)

    def help(self) -> None:
        """Run the tasks no thread has taken yet."""
        while True:
            with self._taking:
                index = self._taken
                self._taken += 1
            if index >= len(self._tasks):
                return
            try:
                if not self._errors:  # after an error the rows are lost: skip the rest
                    self._files.read(*self._tasks[index], self._pile)
            except BaseException as error:
                self._errors.append(error)
            finally:
                with self._finished:
                    self._left -= 1
                    if self._left == 0:
                        self._finished.notify_all()

    def cancel(self) -> None:
        """Run no task not yet begun: :meth:`result` raises :class:`ReadCancelledError` once those under way end."""
        self._errors.append(ReadCancelledError("The read was cancelled: whoever asked for these rows has gone."))

    def result(self) -> ArrayRows:
        """The rows, once every task is done (helping until then); the first error if one failed."""
        self.help()
        with self._finished:
            self._finished.wait_for(lambda: self._left == 0)
        if self._errors:
            raise self._errors[0]
        return self.rows
