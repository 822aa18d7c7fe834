"""Other libraries' private internals, one adapter module per library.

Where no public API does what daskshuffle needs, the private attribute or
class is reached here and nowhere else: :mod:`._distributed` (a scheduler's
comm handlers, a worker's tasks) and :mod:`._fsspec` (the filesystems of its
instance caches, the answers s3fs's client gets). Each module's ``CHECKED`` names the
versions it was checked against; ``tests/test_compat.py`` warns when an
installed version is not one of them, so that an upgrade is checked again.

The modules import nothing at import time: they are handed the other
library's objects.
"""

from __future__ import annotations

from ._distributed import draw_from_client_loop, running_handlers, running_task_keys
from ._fsspec import cached_filesystems, on_answers

__all__ = [
    "cached_filesystems",
    "draw_from_client_loop",
    "on_answers",
    "running_handlers",
    "running_task_keys",
]
