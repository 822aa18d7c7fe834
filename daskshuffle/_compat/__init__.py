"""Other libraries' private internals, one adapter module per library.

Each module's ``CHECKED`` names the versions it was checked against
(``tests/test_compat.py`` warns on any other). The modules import nothing:
they are handed the other library's objects.
"""

from __future__ import annotations

from ._distributed import draw_from_client_loop, running_handlers, running_task_keys
from ._fsspec import cached_filesystems, made_with, on_answers, requests_through

__all__ = [
    "cached_filesystems",
    "draw_from_client_loop",
    "made_with",
    "on_answers",
    "requests_through",
    "running_handlers",
    "running_task_keys",
]
