"""What the machine gives a process: its memory, the container's limit where one is set (no psutil, no dask)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["memory_nbytes"]

#: The cgroup files that hold a container's memory limit, v2 then v1.
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def memory_nbytes() -> int | None:
    """Bytes of memory this process may use: the machine's, or its container's limit if lower; ``None`` if unknown.

    Examples
    --------
    >>> found = memory_nbytes()
    >>> found is None or found > 0
    True
    """
    try:
        found: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system that tells
        found = None
    for path in CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:  # "max" (v2) or a huge number (v1) mean no limit
            found = int(text) if found is None else min(found, int(text))
    return found
