"""The library's own files and directories: never written, truncated or removed through what someone else placed.

A link placed at one of the library's names would, opened for writing,
truncate what it points to: local paths are looked at with ``lstat`` and
opened with ``O_NOFOLLOW``, and anything but the library's own is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO

from .._errors import UnsafePathError

__all__ = ["NOFOLLOW", "found_at", "open_file", "open_writer", "refuse", "refuse_below", "unsafe"]

#: ``O_NOFOLLOW`` where the system has it (a link as the last part of the path is not followed).
NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)
#: What ``os.open`` says when the path is a link (``O_NOFOLLOW``), a directory, or a FIFO nobody reads.
_REFUSED = {errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR}


def found_at(path: str, *, directory: bool = False) -> str | None:
    """What is at the local ``path`` that the library would not have made there, in words; ``None`` if nothing is.

    A link is never the library's; nor is a FIFO, socket or device. With
    ``directory``, the library's path is a directory (a file there is not its
    own); otherwise either kind may be.
    """
    try:
        status = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    mode = status.st_mode
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link to {os.readlink(path)!r}"
        except OSError:
            return "a symbolic link"
    if stat.S_ISDIR(mode) or (stat.S_ISREG(mode) and not directory):
        return None
    if stat.S_ISREG(mode):
        return "a file"
    return "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device or special file"


def unsafe(path: str, what: str, found: str) -> UnsafePathError:
    """The error for ``found`` (:func:`found_at`'s words) at ``path``, where the library keeps ``what``."""
    return UnsafePathError(
        f"Expected {path!r} to be absent or {what} that daskshuffle made. Got {found} instead, which daskshuffle did "
        "not make: it writes, truncates and removes nothing through it. Remove it by hand if it is not needed, or "
        "choose another destination."
    )


def refuse(path: str, what: str, *, directory: bool = False) -> None:
    """Raise :class:`UnsafePathError` if something the library did not make is at the local ``path``."""
    found = found_at(path, directory=directory)
    if found is not None:
        raise unsafe(path, what, found)


def refuse_below(path: str, what: str) -> None:
    """:func:`refuse` for the local directory ``path`` and everything below it (a run's scratch space it continues in).

    Whatever is below was made by the library, or placed there by someone
    else: a link or special file anywhere in the tree is refused, before
    anything is written into it again.
    """
    refuse(path, what)
    for directory, names, files in os.walk(path, followlinks=False):
        for name in names + files:  # a link to a directory is listed with the directories, and not entered
            refuse(os.path.join(directory, name), f"a file of {what}")


def open_file(path: str, flags: int, what: str, *, dir_fd: int | None = None) -> int:
    """``os.open`` of a regular file at the local ``path``, never through a link (nor of a FIFO, socket, device).

    ``flags`` are ``os.open``'s (``os.O_RDWR | os.O_CREAT``, ...); what is at
    ``path`` otherwise is refused with :class:`UnsafePathError` and left as
    it is. With ``dir_fd``, ``path`` is a name in that open directory.
    """
    try:
        # Non-blocking, so that a FIFO placed there is refused instead of waiting for a reader or writer.
        fd = os.open(path, flags | NOFOLLOW | _NONBLOCK, 0o644, dir_fd=dir_fd)
    except OSError as error:
        if error.errno not in _REFUSED:
            raise
        found = (found_at(path) if dir_fd is None else None) or "a symbolic link, a directory or a FIFO"
        raise unsafe(path, what, found) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise unsafe(path, what, "a FIFO, socket or device")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_writer(path: str, what: str) -> IO[bytes]:
    """The local file ``path``, created or truncated, open for writing bytes; never through a link."""
    fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, what)
    return os.fdopen(fd, "wb")
