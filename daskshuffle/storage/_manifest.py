"""What a shuffle has finished, recorded as it goes, so that the same call after a crash continues.

Tasks are deterministic: one killed before its mark runs again and writes the
same bytes; a marked one is not run again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _own
from ._location import Location

__all__ = ["Manifest", "run_marked", "run_once"]


@dataclass(frozen=True)
class Manifest:
    """The finished tasks of one shuffle, as names under ``location``.

    Examples
    --------
    >>> manifest = Manifest(Location.of("memory://scratch/_done"))
    >>> manifest.mark("scatter-0"); manifest.mark("merge-2")
    >>> sorted(manifest.done())
    ['merge-2', 'scatter-0']
    """

    location: Location

    def mark(self, name: str) -> None:
        inner = self.location.path
        if not self.location.is_local:
            self.location.makedirs()
            self.location.join(name).write_whole(b"")
            return
        # Locally, never through a link placed at the manifest or a mark: it would make or empty a file elsewhere.
        _own.refuse(inner, "a manifest directory", directory=True)
        os.makedirs(inner, exist_ok=True)
        os.close(_own.open_file(f"{inner}/{name}", os.O_WRONLY | os.O_CREAT, "a manifest mark"))

    def done(self) -> frozenset[str]:
        return frozenset(self.location.names())


def run_marked(manifest: Manifest, name: str, task: Callable[..., Any], *args: Any) -> Any:
    """``task(*args)``, then ``name`` marked done (a task function of the graph)."""
    result = task(*args)
    manifest.mark(name)
    return result


def run_once(manifest: Manifest, name: str, task: Callable[..., Any], *args: Any) -> Any:
    """``task(*args)`` and ``name`` marked, unless it is marked already: then ``None``.

    For tasks whose result is ``None`` (a pile store's scatter tasks): one that
    dask runs again because the worker holding its result was lost returns at
    once instead of redoing its work.
    """
    if manifest.location.join(name).exists():
        return None
    return run_marked(manifest, name, task, *args)
