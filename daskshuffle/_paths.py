"""Paths and URLs, local or remote, through fsspec."""

from __future__ import annotations

import os
import time
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

__all__ = ["exists", "filesystem", "is_url", "normalize", "overlaps", "remove", "scratch", "sibling"]

PathLike = str | os.PathLike[str]
_REMOVE_ATTEMPTS = 5


def is_url(path: PathLike) -> bool:
    return "://" in os.fspath(path)


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


def _inside(child: str, parent: str) -> bool:
    if is_url(child) != is_url(parent):
        return False
    sep = "/" if is_url(child) else os.sep
    return child == parent or child.startswith(parent.rstrip(sep) + sep)


def overlaps(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` are the same location or one lies inside the other."""
    a, b = normalize(a), normalize(b)
    return _inside(a, b) or _inside(b, a)


def filesystem(path: PathLike, storage_options: dict[str, Any] | None = None) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem of ``path`` and the path inside it."""
    fs, inner = fsspec.core.url_to_fs(normalize(path), **(storage_options or {}))
    return fs, inner


def exists(path: PathLike, storage_options: dict[str, Any] | None = None) -> bool:
    fs, inner = filesystem(path, storage_options)
    return bool(fs.exists(inner))


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
