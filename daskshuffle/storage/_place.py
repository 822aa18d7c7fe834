"""What a storage location is (the base of :class:`~daskshuffle.storage._location.Location`, which makes requests
there): a path or URL with its ``storage_options``, its filesystem, the places below and beside it; no request."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

import fsspec
from fsspec import AbstractFileSystem

from .._compat import cached_filesystems
from ._access import reaching
from ._paths import is_url, normalize

__all__ = ["Place"]

# A forked process (a DataLoader worker, a dask process pool) inherits the parent's fsspec filesystems, whose HTTP
# sessions' event loop runs in the parent only: collected in the child, each would print "Unclosed client session"
# and wait on a loop that never answers. So the child keeps them (_inherited), never used.
_inherited: list[object] = []
_forking: list[object] = []


def _before_fork() -> None:
    _forking[:] = cached_filesystems(AbstractFileSystem)


def _after_fork_in_child() -> None:
    _inherited.extend(_forking)
    _forking.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_forking.clear, after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class Place:
    """A place in a filesystem: its URL (a local path for a local disk) and the options that reach it."""

    #: The canonical spelling: an absolute real path for a local file, fsspec's URL otherwise; no trailing slash.
    url: str
    #: The fsspec options of this storage (``None`` for a local path), as zarr, xarray and dask take them.
    options: dict[str, Any] | None = field(default=None, repr=False, hash=False)

    @classmethod
    def of(cls, where: str | os.PathLike[str] | Self, storage_options: dict[str, Any] | None = None) -> Self:
        """The location of a path or URL reached with ``storage_options``; a :class:`Location` as it is.

        Options are dropped for a local path: one shuffle may read a local
        source and write to S3 with one ``storage_options``.
        """
        if isinstance(where, Place):
            return where
        url = normalize(where)
        return cls(url, dict(storage_options) if storage_options and is_url(url) else None)

    def __str__(self) -> str:
        return self.url

    def __reduce__(self) -> tuple[Any, ...]:
        # Never a live filesystem: a worker builds its own on first use.
        return (type(self), (self.url, self.options))

    def __dask_tokenize__(self) -> tuple[str, str, str]:
        return ("daskshuffle.Location", self.url, json.dumps(self.options, sort_keys=True, default=repr))

    # What the storage is and can do, declared from the URL alone.

    @property
    def protocol(self) -> str:
        """``"file"`` for a local path, else the URL's scheme (``"s3"``, ``"memory"``, ...)."""
        return self.url.split("://", 1)[0] if is_url(self.url) else "file"

    @property
    def is_local(self) -> bool:
        """Whether this is a path on a local disk (of the machine that reads it)."""
        return not is_url(self.url)

    @property
    def is_object_store(self) -> bool:
        """Whether this is an object store: its filesystem has no root marker, and its paths start with a bucket."""
        kind = self._fs_class()  # None if not installed here: nothing to say about it
        return kind is not None and kind.root_marker == ""

    @property
    def can_rename(self) -> bool:
        """Whether a directory moves in one step (a local disk); an object store copies every object."""
        return self.is_local

    # The filesystem, resolved once per process.

    @property
    def fs(self) -> AbstractFileSystem:
        """The fsspec filesystem, made on first use (on a worker, from the URL and options)."""
        return self._fs[0]

    @property
    def path(self) -> str:
        """The path inside :attr:`fs` (no protocol)."""
        return self._fs[1]

    @functools.cached_property
    def _fs(self) -> tuple[AbstractFileSystem, str]:
        with self.reaching():  # a storage option the filesystem does not take is named
            fs, inner = fsspec.core.url_to_fs(self.url, **(self.options or {}))
        return fs, inner

    def _derived(self, url: str, inner: Callable[[str], str]) -> Self:
        location = type(self)(url, self.options)
        if "_fs" in self.__dict__:  # its filesystem resolved: theirs is the same, their path ``inner`` of this one
            object.__setattr__(location, "_fs", (self.fs, inner(self.path)))
        return location

    # Locations below and beside this one.

    @property
    def name(self) -> str:
        """The last part of the path: ``"piles.zarr"`` of ``s3://bucket/piles.zarr``."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def bucket(self) -> str:
        """The first component of the path: on an object store, the bucket."""
        return self.path.strip("/").split("/", 1)[0]

    def join(self, name: str) -> Self:
        """The location ``name`` below this one (``name`` may hold ``/``)."""
        name = name.strip("/")
        return self._derived(f"{self.url.rstrip('/')}/{name}", lambda path: f"{path.rstrip('/')}/{name}")

    def with_suffix(self, suffix: str) -> Self:
        """The location beside this one whose name ends with ``suffix``: ``/a/b.zarr`` -> ``/a/b.zarr<suffix>``."""
        return self._derived(self.url + suffix, lambda path: path + suffix)

    def scratch(self, suffix: str, directory: Self | None = None) -> Self:
        """Where a shuffle into this location keeps its temporary files, removed when it ends.

        Beside it by default (:meth:`with_suffix`); inside ``directory`` when
        one is given, in a subdirectory named after this location and a digest
        of its URL (``piles.zarr-<digest>.daskshuffle-tmp``), so that removing
        the scratch space never removes the directory the caller named, nor
        the scratch space of another destination of the same name.
        """
        if directory is None:
            return self.with_suffix(suffix)
        return directory.join(f"{self.name}-{hashlib.sha256(self.url.encode()).hexdigest()[:16]}{suffix}")

    # Reaching the storage.

    @contextlib.contextmanager
    def reaching(self, what: str | None = None) -> Iterator[None]:
        """Raise any failure to reach the storage in the body as :func:`~daskshuffle.storage._access.raise_storage_failure`
        names it, for this location (``what``: the file read, if not this one); any other error as it is."""
        with reaching(self.url, self.options, self._fs_class(), what=what):
            yield

    def _fs_class(self) -> Any:
        try:
            return fsspec.get_filesystem_class(self.protocol) if not self.is_local else None
        except (ImportError, ValueError):
            return None
