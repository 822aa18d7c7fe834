"""One shuffle at a time into a destination: a lock file beside it.

Two shuffles writing one destination would write over each other's store, and
the first to finish (or fail) would remove the other's pieces. The lock is
``<dst>.daskshuffle-lock``, created exclusively (``open(..., "x")`` on a local
disk; on object storage, which has no exclusive create, written and read back
to see which run wrote last). It records the run's host and process, so that a
lock left by a killed process on this host is taken over, and a lock held by a
live one is refused with what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from .._errors import DaskShuffleValueError
from . import _paths

__all__ = ["LOCK_SUFFIX", "exclusive"]

LOCK_SUFFIX = ".daskshuffle-lock"


def _holder() -> dict[str, Any]:
    return {"run": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _stale(holder: dict[str, Any]) -> bool:
    """A lock whose process is gone: it ran on this host and that process no longer runs."""
    return holder.get("host") == socket.gethostname() and not _alive(int(holder.get("pid", 0)))


def _read(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        with fs.open(path, "r") as file:
            found = json.load(file)
    except (FileNotFoundError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _refuse(dst: str, path: str, holder: dict[str, Any]) -> DaskShuffleValueError:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("since", 0))))
    return DaskShuffleValueError(
        f"Expected no other shuffle writing {dst!r}. Got one instead: process {holder.get('pid')} on "
        f"{holder.get('host')!r}, since {since}; wait for it to end, or, if it is gone, remove {path!r}.",
        parameter="dst",
    )


@contextlib.contextmanager
def exclusive(dst: str, storage_options: dict[str, Any] | None) -> Iterator[None]:
    """Hold the lock of ``dst`` for the body; refuse if another live shuffle holds it."""
    path = _paths.sibling(dst, LOCK_SUFFIX)
    fs, inner = _paths.filesystem(path, storage_options)
    ours = _holder()
    text = json.dumps(ours)
    if isinstance(fs, LocalFileSystem):
        os.makedirs(os.path.dirname(inner) or ".", exist_ok=True)
        for _ in range(2):
            try:
                with open(inner, "x") as file:
                    file.write(text)
                break
            except FileExistsError:
                holder = _read(fs, inner) or {}
                if not _stale(holder):
                    raise _refuse(dst, path, holder) from None
                with contextlib.suppress(FileNotFoundError):
                    os.remove(inner)  # left by a killed process on this host
        else:
            raise _refuse(dst, path, _read(fs, inner) or {})
    else:
        found = _read(fs, inner)
        if found is not None and not _stale(found):
            raise _refuse(dst, path, found)
        fs.pipe_file(inner, text.encode())
        if (_read(fs, inner) or {}).get("run") != ours["run"]:
            raise _refuse(dst, path, _read(fs, inner) or {})
    try:
        yield
    finally:
        if (_read(fs, inner) or {}).get("run") == ours["run"]:
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(inner)
