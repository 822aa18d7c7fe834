"""Reads of a Zarr pile store's rows that another thread may cancel.

A read is a list of tasks, each the chunk files of one variable that hold some
of its rows (:class:`~daskshuffle.readers._zarr_chunks.ChunkFiles` reads them).
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, InvalidStateError
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
    """Rows being read, task after task (chunk files of a variable, for a run of rows), in the thread that asks for them.

    :meth:`cancel`, from any thread, stops the read after the task under way, or at once if it waits for a fetch.
    """

    def __init__(self, files: ChunkFiles, rows: ArrayRows, tasks: list[Task], pile: int | None) -> None:
        self.rows = rows
        #: The name of the thread that started the read: :meth:`ZarrPileReader.cancel_reads` cancels by it.
        self.owner = threading.current_thread().name
        self._files = files
        self._tasks = tasks
        self._pile = pile
        #: Done once the read is cancelled: a task waiting for a fetch stops waiting.
        self._stopped: Future[None] = Future()

    def cancel(self) -> None:
        """Run no task not yet begun, and stop waiting for a fetch: :meth:`result` raises :class:`ReadCancelledError`."""
        with contextlib.suppress(InvalidStateError):  # cancelled already
            self._stopped.set_result(None)

    def result(self) -> ArrayRows:
        """The rows, once every task is done."""
        for task in self._tasks:
            if self._stopped.done():
                raise ReadCancelledError("The read was cancelled: whoever asked for these rows has gone.")
            self._files.read(*task, self._pile, self._stopped)
        return self.rows
