"""Named points between the writes of a step that takes several, where a test kills the process for real.

``append``, ``evict`` and ``compact`` each change a store in several writes (a
generation, the root's list, its consolidated metadata, the removal of old
files); a process killed between two of them leaves the store readable but
with leftovers, which the next run (or ``daskshuffle info --clean``) finds
and removes. To test each window with a real kill, a process whose
environment sets ``DASKSHUFFLE_CRASH_AT=<point>`` sends itself SIGKILL on
reaching that point: nothing runs on the way out (no ``finally``, no
``atexit``), as when a machine loses power. Unset, a point costs one lookup
in ``os.environ``.
"""

from __future__ import annotations

import os
import signal

__all__ = ["CRASH_AT", "crash_point"]

#: The environment variable that names the point where the process kills itself.
CRASH_AT = "DASKSHUFFLE_CRASH_AT"


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL if ``DASKSHUFFLE_CRASH_AT`` names ``name``; otherwise do nothing."""
    if os.environ.get(CRASH_AT) == name:
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
