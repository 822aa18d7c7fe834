"""Named points where a test kills, fails, pauses or counts a run: the one fault hook.

A process whose environment sets ``DASKSHUFFLE_CRASH_AT=<point>`` sends itself
SIGKILL there (as when a machine loses power; dask workers inherit the
environment); in this process, :func:`armed` calls an action at the point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

from .._errors import DaskShuffleValueError

__all__ = ["CRASH_AT", "POINTS", "armed", "crash_point"]

#: The environment variable that names the point where the process kills itself.
CRASH_AT = "DASKSHUFFLE_CRASH_AT"
#: Every point the library reaches (a test checks that each is reached in the source, by that name).
POINTS = frozenset(
    {
        "scatter",
        "scatter spans",
        "merge",
        "shuffle written",
        "shuffle complete",
        "text file written",
        "text file moved",
        "chunk read",
        "lock opened",
        "lock stale",
        "append shuffled",
        "root listed",
        "evict listed",
        "evict removed",
        "compact copied",
        "compact listed",
        "compact removed",
    }
)

#: The points armed in this process: for each, the times it was reached and the action.
_armed: dict[str, tuple[list[int], Callable[[int], object]]] = {}
_counting = threading.Lock()


def crash_point(name: str) -> None:
    """Reach the point ``name``: killed here if ``DASKSHUFFLE_CRASH_AT`` names it, the armed action if armed."""
    if os.environ.get(CRASH_AT) == name:
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
    found = _armed.get(name)
    if found is not None:
        reached, action = found
        with _counting:
            reached.append(len(reached) + 1)
            count = reached[-1]
        action(count)


@contextlib.contextmanager
def armed(name: str, action: Callable[[int], object] = lambda count: None) -> Iterator[list[int]]:
    """Call ``action(count)`` each time this process reaches the point ``name`` in the block (``count``: 1, 2, ...).

    Yields the list of counts reached so far (its length is how many times the
    point was reached). ``name`` is one of :data:`POINTS`; points armed at once
    must have different names.

    Examples
    --------
    >>> with armed("merge") as reached:
    ...     crash_point("merge")
    ...     crash_point("merge")
    >>> reached
    [1, 2]
    >>> def third(count: int) -> None:
    ...     if count == 3:
    ...         raise OSError("the third merge fails")
    >>> with armed("merge", third):
    ...     for _ in range(5):
    ...         crash_point("merge")
    Traceback (most recent call last):
    OSError: the third merge fails
    """
    if name not in POINTS:  # a point renamed would never be reached, and a count of it stay 0
        raise DaskShuffleValueError(f"Expected one of the points {sorted(POINTS)}. Got {name!r} instead.")
    if name in _armed:
        raise DaskShuffleValueError(
            f"Expected the point {name!r} to be armed once at a time. Got it armed already instead."
        )
    reached: list[int] = []
    _armed[name] = (reached, action)
    try:
        yield reached
    finally:
        del _armed[name]
