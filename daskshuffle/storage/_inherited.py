"""The filesystems a forked process inherits stay alive there, never used and never collected.

A forked process (a ``DataLoader`` worker, a dask process pool) inherits the
parent's fsspec filesystems, whose HTTP sessions' event loop runs in the
parent only: collected in the child, each would print ``Unclosed client
session`` and wait on a loop that never answers. So the child keeps them.
"""

from __future__ import annotations

import os

from fsspec import AbstractFileSystem

from .._compat import cached_filesystems

__all__: list[str] = []

#: The filesystems this process inherited from the processes it was forked from.
_inherited: list[object] = []
#: The parent's filesystems while it forks: the child keeps them, the parent lets go.
_forking: list[object] = []


def _before_fork() -> None:
    _forking[:] = cached_filesystems(AbstractFileSystem)


def _after_fork_in_child() -> None:
    _inherited.extend(_forking)
    _forking.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_forking.clear, after_in_child=_after_fork_in_child)
