"""An optional progress bar over a loader's epoch, redrawn a few times a second."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Progress"]

#: Redraw at most this often, so that the bar costs nothing per batch.
_PROGRESS_SECONDS = 0.2


class Progress:
    """A progress bar over ``total`` batches of ``epoch``, of which ``completed`` are done; nothing if not ``enabled``."""

    def __init__(self, enabled: bool, epoch: int, total: int, completed: int) -> None:
        self._bar: Any = None
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        # auto_refresh=False: rich would otherwise start a thread of its own.
        self._bar = RichProgress(
            TextColumn(f"epoch {epoch}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), auto_refresh=False
        )
        self._task = self._bar.add_task("batches", total=total, completed=completed)
        self._drawn = 0.0
        self._bar.start()

    def advance(self) -> None:
        if self._bar is None:
            return
        self._bar.advance(self._task)
        now = time.monotonic()
        if now - self._drawn > _PROGRESS_SECONDS:
            self._drawn = now
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.refresh()
            self._bar.stop()
