"""Paths and URLs as strings (their canonical spelling, which lies inside which), and replacing one store by another.

What is reached through a filesystem is reached through a
:class:`~daskshuffle.storage._location.Location`.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import TYPE_CHECKING

import fsspec

from .._threads import each

if TYPE_CHECKING:
    from ._location import Location

__all__ = ["inside", "is_url", "normalize", "overlaps", "replace"]

PathLike = str | os.PathLike[str]


def is_url(path: PathLike) -> bool:
    return "://" in os.fspath(path)


def normalize(path: PathLike) -> str:
    """A canonical spelling: absolute real paths for local files, no trailing slash."""
    text = os.fspath(path).removeprefix("file://")
    if not is_url(text):
        return os.path.realpath(os.path.expanduser(text))
    try:  # fsspec's own spelling, e.g. memory://a -> memory:///a
        fs, inner = fsspec.core.url_to_fs(text)
        text = fs.unstrip_protocol(inner)
    except (ImportError, ValueError):  # a filesystem that is not installed here: compare as written
        pass
    return text.rstrip("/")


def inside(child: str, parent: str) -> bool:
    if is_url(child) != is_url(parent):
        return False
    sep = "/" if is_url(child) else os.sep
    return child == parent or child.startswith(parent.rstrip(sep) + sep)


def overlaps(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` are the same location or one lies inside the other."""
    a, b = normalize(a), normalize(b)
    return inside(a, b) or inside(b, a)


#: The files that mark a store complete (a Zarr group's root metadata, a Parquet
#: pile store's sidecar): copied last, so that a copy cut short is not a store.
_MARKS = ("zarr.json", "_daskshuffle.json")
#: Server-side copies of a store replaced on object storage at once, each a request of its own.
_COPIES = 32
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Swap two local paths in one step (Linux ``renameat2``); ``False`` where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without renameat2
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    return int(renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)) == 0


def replace(new: Location, dst: Location) -> None:
    """Put the complete store ``new`` where ``dst`` is (``dst`` may exist), and remove the old one.

    Where the storage can rename (a local disk) the two are swapped in one
    step (``renameat2`` exchange on Linux; elsewhere ``dst`` is renamed aside,
    then ``new`` renamed into place): a reader of ``dst`` sees the old store or
    the new one, complete. Elsewhere (object storage) the old store is removed,
    then ``new`` is copied (server side) with the files that mark a store
    complete last, and removed; if that is cut short, ``new`` is still there,
    complete. Each request (a listing, the copy of one file) within the
    request deadline.
    """
    new_inner, dst_inner = new.path, dst.path
    if dst.can_rename:
        if not os.path.lexists(dst_inner):
            os.rename(new_inner, dst_inner)
            return
        if _exchange(new_inner, dst_inner):
            new.remove()  # now the old store
            return
        aside = dst.with_suffix(".daskshuffle-old")
        aside.remove()
        os.rename(dst_inner, aside.path)
        os.rename(new_inner, dst_inner)
        aside.remove()
        return
    dst.remove()
    if not new.isdir():
        new.request("copy", dst_inner)
    else:
        relative = [path[len(new_inner.rstrip("/")) + 1 :] for path in sorted(new.request("find"))]

        def copy(name: str) -> None:  # one request, its own deadline
            new.join(name).request("cp_file", dst.join(name).path)

        for marks in (False, True):  # the files that mark a store complete, last
            each(copy, [name for name in relative if (name in _MARKS) == marks], _COPIES)
    new.remove()
