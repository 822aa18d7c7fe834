"""The directory of a :class:`~daskshuffle.storage._cache.Cache`: checked, claimed, and listed by its own names.

Every look below the directory is by name from an open directory, without
following a link (``O_NOFOLLOW``, ``lstat``); see ``_cache.py`` for the rules.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time

from .._errors import DaskShuffleValueError
from . import _own

__all__ = [
    "FILE_NAME",
    "MARKER",
    "PARTIAL",
    "check_directory",
    "claim",
    "close",
    "listed",
    "open_store_directory",
    "refused",
]

#: The file that marks a directory as a cache's own.
MARKER = ".daskshuffle-cache"
_MARKER_TEXT = b'{"daskshuffle": "cache", "version": 1}\n'
PARTIAL = ".partial-"
#: The names the cache gives: a store's directory, a cached file, a file being written.
_STORE_NAME = re.compile(r"[0-9a-f]{32}")
FILE_NAME = re.compile(r"[0-9a-f]{64}")
_PARTIAL_NAME = re.compile(re.escape(PARTIAL) + r"[0-9a-f]{32}")
#: A file being written that is older than this was left by a loader that was killed: the cache removes it.
PARTIAL_AGE = 3600.0
DIRECTORY_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _own.NOFOLLOW


def refused(path: str, got: str, advice: str) -> DaskShuffleValueError:
    return DaskShuffleValueError(
        f"Expected cache to be a directory of the cache's own: missing, empty, or made by a daskshuffle.Cache. "
        f"Got {path!r}, {got}, instead; {advice}",
        parameter="cache",
    )


def check_directory(path: str) -> None:
    """Refuse a cache directory the cache cannot own: a file, a path below one, or a user's directory."""
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        parent = os.path.dirname(path)
        while parent != os.path.dirname(parent) and not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise refused(path, f"which lies below a file, {parent!r}", "pass a directory on a local disk.") from None
        if not os.access(parent, os.W_OK | os.X_OK):
            raise refused(path, f"whose directory {parent!r} may not be written", "pass one that may.") from None
        return
    if not stat.S_ISDIR(status.st_mode):
        raise refused(path, "which is a file", "pass a directory (it is made if missing).")
    marker = os.path.join(path, MARKER)
    _own.refuse(marker, "a cache's mark")
    entries = [name for name in os.listdir(path) if name != MARKER]
    if entries and os.path.isfile(marker):
        return  # a cache's own
    if entries:
        shown = ", ".join(repr(name) for name in sorted(entries)[:3]) + (", ..." if len(entries) > 3 else "")
        raise refused(
            path,
            f"which holds {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} a cache did not make ({shown})",
            "the cache removes files to keep to its size, and only its own: pass a new or empty directory, such as "
            f"{os.path.join(path, 'daskshuffle-cache')!r}.",
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise refused(path, "which may not be written", "pass one that may.")


def claim(directory: str) -> int:
    """Make ``directory`` the cache's own (made if missing, marked if empty) and open it; its descriptor."""
    check_directory(directory)  # again: what was there when the Cache was made may have changed
    os.makedirs(directory, exist_ok=True)
    root = os.open(directory, DIRECTORY_FLAGS)
    try:
        try:
            marker = _own.open_file(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, "a cache's mark", dir_fd=root)
        except FileExistsError:  # marked already (by another loader at the same moment, perhaps)
            os.close(_own.open_file(MARKER, os.O_RDONLY, "a cache's mark", dir_fd=root))
        else:
            with os.fdopen(marker, "wb") as file:
                file.write(_MARKER_TEXT)
    except BaseException:
        os.close(root)
        raise
    return root


def open_store_directory(root: int, directory: str, name: str) -> int:
    """The directory ``name`` of the cache (made if missing), opened without following a link."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, dir_fd=root)
    try:
        return os.open(name, DIRECTORY_FLAGS, dir_fd=root)
    except OSError as error:  # a link or a file placed at the store's name
        path = os.path.join(directory, name)
        raise _own.unsafe(path, "a cache's directory of a store", _own.found_at(path) or "a file") from error


def close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def listed(root: int, own: str, own_fd: int) -> tuple[list[tuple[float, int, int, str]], list[int]]:
    """Every file of the cache's naming below ``root``: (read time, size, directory's descriptor, name), and the
    directories opened here (``own``, open as ``own_fd``, is not opened again). Files being written that were left
    long ago are removed here."""
    files: list[tuple[float, int, int, str]] = []
    opened: list[int] = []
    now = time.time()
    for store in os.listdir(root):
        if not _STORE_NAME.fullmatch(store):
            continue
        if store == own:
            directory = own_fd
        else:
            try:
                directory = os.open(store, DIRECTORY_FLAGS, dir_fd=root)  # a link placed here is not followed
            except OSError:
                continue
            opened.append(directory)
        for name in os.listdir(directory):
            try:
                status = os.stat(name, dir_fd=directory, follow_symlinks=False)
            except OSError:  # evicted by another loader meanwhile
                continue
            if not stat.S_ISREG(status.st_mode):
                continue
            if FILE_NAME.fullmatch(name):
                files.append((status.st_mtime, status.st_size, directory, name))
            elif _PARTIAL_NAME.fullmatch(name) and now - status.st_mtime > PARTIAL_AGE:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=directory)
    return files, opened
