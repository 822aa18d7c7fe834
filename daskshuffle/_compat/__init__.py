"""Other libraries' private internals, one adapter module per library.

Where no public API does what daskshuffle needs, the private attribute or
class is reached here and nowhere else: :mod:`._distributed` (a scheduler's
comm handlers, a worker's tasks), :mod:`._dask` (a DataFrame's empty meta),
:mod:`._fsspec` (the filesystems of its instance caches) and :mod:`._torch`
(a ``DataLoader``'s fetcher). Each module's ``CHECKED`` names the
versions it was checked against; ``tests/test_compat.py`` fails when an
installed version is not one of them, so that an upgrade is checked again.

The modules import nothing at import time: they are handed the other
library's objects, and the torch adapter imports torch when called.
"""

from __future__ import annotations

from ._dask import dataframe_meta
from ._distributed import draw_from_client_loop, running_handlers, running_task_keys
from ._fsspec import cached_filesystems
from ._torch import is_collating_fetcher

__all__ = [
    "cached_filesystems",
    "dataframe_meta",
    "draw_from_client_loop",
    "is_collating_fetcher",
    "running_handlers",
    "running_task_keys",
]
