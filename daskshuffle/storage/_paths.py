"""Paths and URLs, local or remote, through fsspec."""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import fsspec
from fsspec import AbstractFileSystem

from .._errors import StorageAccessError, StorageNotFoundError

if TYPE_CHECKING:
    from ._location import Location

__all__ = [
    "check_location",
    "exists",
    "filesystem",
    "inside",
    "is_url",
    "normalize",
    "overlaps",
    "remove",
    "replace",
    "scratch",
    "sibling",
    "url_options",
]

PathLike = str | os.PathLike[str]
_REMOVE_ATTEMPTS = 5


def is_url(path: PathLike) -> bool:
    return "://" in os.fspath(path)


def url_options(path: PathLike, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``storage_options`` for a URL, ``None`` for a local path.

    One shuffle may read a local source and write to S3 (or the reverse) with
    one ``storage_options``; zarr refuses options with a local path.
    """
    return storage_options if is_url(path) else None


def normalize(path: PathLike) -> str:
    """A canonical spelling: absolute real paths for local files, no trailing slash."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
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


def filesystem(path: PathLike, storage_options: dict[str, Any] | None = None) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem of ``path`` and the path inside it."""
    fs, inner = fsspec.core.url_to_fs(normalize(path), **(storage_options or {}))
    return fs, inner


def _access_error(path: PathLike, error: BaseException) -> StorageAccessError:
    return StorageAccessError(
        f"Expected credentials that may read and write {os.fspath(path)!r}. Got access denied ({error}) instead; "
        "check the credentials in storage_options (for S3: key and secret, or AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY or AWS_PROFILE in the environment) and the permissions on this path.",
        parameter="storage_options",
    )


def exists(path: PathLike, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether ``path`` exists; refused credentials raise :class:`StorageAccessError` naming it."""
    fs, inner = filesystem(path, storage_options)
    try:
        return bool(fs.exists(inner))
    except PermissionError as error:
        if isinstance(error, StorageAccessError):
            raise
        raise _access_error(path, error) from error


def check_location(path: PathLike, storage_options: dict[str, Any] | None, name: str) -> None:
    """Before anything is written: the credentials are accepted and, on an object store, the bucket exists.

    An object store's paths start with a bucket (its filesystem has no root
    marker); daskshuffle never creates one.
    """
    exists(path, storage_options)  # refused credentials are named here
    fs, inner = filesystem(path, storage_options)
    if not is_url(path) or getattr(fs, "root_marker", "/") != "":
        return
    bucket = inner.strip("/").split("/", 1)[0]
    try:
        found = bool(fs.exists(bucket))
    except PermissionError as error:
        raise _access_error(path, error) from error
    if not found:
        raise StorageNotFoundError(
            f"Expected the bucket of {name} to exist. Got {os.fspath(path)!r}, whose bucket {bucket!r} does not exist "
            "(or these credentials cannot see it), instead; create the bucket first, or check the URL and "
            "storage_options.",
            parameter=name,
        )


def remove(path: PathLike, storage_options: dict[str, Any] | None = None) -> None:
    """Remove ``path`` and everything below it, if it exists."""
    fs, inner = filesystem(path, storage_options)
    for attempt in range(_REMOVE_ATTEMPTS):
        if not fs.exists(inner):
            return
        try:
            fs.rm(inner, recursive=True)
            return
        except OSError:
            # A cancelled task on a cluster may still be finishing a write below
            # ``path``; give it a moment, then try again.
            if attempt == _REMOVE_ATTEMPTS - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def scratch(dst: PathLike, suffix: str, directory: PathLike | None = None) -> str:
    """Where a shuffle into ``dst`` keeps its temporary files, removed when it ends.

    Next to ``dst`` by default; inside ``directory`` when one is given, in a
    subdirectory named after ``dst``, so that removing the scratch space never
    removes the directory the caller named.
    """
    if directory is None:
        return sibling(dst, suffix)
    name = normalize(dst).rsplit("/", 1)[-1]
    return f"{normalize(directory)}/{name}{suffix}"


def sibling(path: PathLike, suffix: str) -> str:
    """A path next to ``path``: ``/a/b.zarr`` -> ``/a/b.zarr<suffix>``."""
    return normalize(path) + suffix


#: The files that mark a store complete (a Zarr group's root metadata, a Parquet
#: pile store's sidecar): copied last, so that a copy cut short is not a store.
_MARKS = ("zarr.json", "_daskshuffle.json")
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
    complete.
    """
    fs, new_inner, dst_inner = new.fs, new.path, dst.path
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
    if fs.isfile(new_inner):
        fs.copy(new_inner, dst_inner)
    else:
        files = sorted(fs.find(new_inner))
        relative = [path[len(new_inner.rstrip("/")) + 1 :] for path in files]
        last = [name for name in relative if name in _MARKS]
        first = [name for name in relative if name not in _MARKS]
        for batch in (first, last):
            if batch:
                fs.copy([f"{new_inner}/{name}" for name in batch], [f"{dst_inner}/{name}" for name in batch])
    new.remove()
