"""A local cache of a remote pile store's files, for the epochs after the first.

An epoch reads every file of the pile store (a rank, every file of its piles).
From object storage the second epoch would fetch them all again; with a cache
on a local disk it reads them from there. Files are kept under a directory of
the store's fingerprint, so a store written again is never confused with the
old one, and removed oldest-read first once the cache holds more than its
limit. Several loaders on one machine may share a cache directory: a file
appears whole (written aside, then renamed into place) or not at all, and a
file that another loader evicted is simply fetched again.

The cache trusts nothing it holds: the reader checks each file as it checks
one fetched (a chunk's crc32c), and a damaged cached file is evicted and
fetched again from the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import DaskShuffleTypeError, DaskShuffleValueError
from .._parse import parse_nbytes

__all__ = ["Cache", "StoreCache", "parse_cache"]

#: The cache's limit unless one is given.
DEFAULT_MAX_SIZE = 10 * 2**30
#: Files written between two looks at the whole cache's size, as a fraction of the limit.
SCAN_FRACTION = 0.05
_PARTIAL = ".partial-"


@dataclass(frozen=True)
class Cache:
    """A directory on a local disk where a loader keeps the files of a remote pile store.

    Parameters
    ----------
    directory : path
        Where the files go (made if missing). Loaders on one machine may share it.
    max_size : int or str, default "10GiB"
        The most bytes the cache holds: past it, the files read longest ago are removed.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> cache = ds.Cache("loader-cache", max_size="2GiB")
    >>> cache.max_size
    2147483648
    """

    directory: str
    max_size: int = DEFAULT_MAX_SIZE

    def __init__(self, directory: str | os.PathLike[str], max_size: int | str = DEFAULT_MAX_SIZE) -> None:
        if not isinstance(directory, str | os.PathLike):
            raise DaskShuffleTypeError(
                f"Expected cache to be a local directory or a daskshuffle.Cache. Got {type(directory).__name__} "
                "instead.",
                parameter="cache",
            )
        path = os.fspath(directory)
        if "://" in path:
            raise DaskShuffleValueError(
                f"Expected cache to be a directory on a local disk. Got {path!r} instead; the cache holds what is "
                "read from remote storage, so that later epochs read it locally.",
                parameter="cache",
            )
        object.__setattr__(self, "directory", os.path.realpath(os.path.expanduser(path)))
        object.__setattr__(self, "max_size", parse_nbytes(max_size, "max_size"))

    def for_store(self, fingerprint: str) -> StoreCache:
        """The part of the cache that holds the files of the store of ``fingerprint``."""
        return StoreCache(self, fingerprint)


def parse_cache(value: object) -> Cache | None:
    """``cache=`` as a :class:`Cache`: ``None``, a directory, or a ``Cache``."""
    if value is None or isinstance(value, Cache):
        return value
    if isinstance(value, str | os.PathLike):
        return Cache(value)
    raise DaskShuffleTypeError(
        f"Expected cache to be a local directory or a daskshuffle.Cache. Got {type(value).__name__} instead.",
        parameter="cache",
    )


@dataclass
class StoreCache:
    """The cached files of one store: read, written and evicted by the store's paths. Safe across threads.

    What the cache holds is listed once, when it is opened, and kept up to
    date with what this object writes and evicts: :meth:`holds` costs no look
    at the disk. A file that another loader evicted since is found missing
    when it is read, and fetched then.
    """

    cache: Cache
    fingerprint: str
    _root: str = field(init=False)
    _names: dict[str, str] = field(default_factory=dict, init=False)
    _held: set[str] = field(default_factory=set, init=False)
    _written: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(self.fingerprint.encode()).hexdigest()[:32]
        self._root = os.path.join(self.cache.directory, digest)
        with contextlib.suppress(FileNotFoundError):
            self._held = {name for name in os.listdir(self._root) if not name.startswith(_PARTIAL)}

    def __getstate__(self) -> dict[str, Any]:
        return {"cache": self.cache, "fingerprint": self.fingerprint}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def _name(self, path: str) -> str:
        # The store's own path is not a safe local name (a URL, a key with any characters): a digest is.
        name = self._names.get(path)
        if name is None:
            name = self._names[path] = hashlib.sha256(path.encode()).hexdigest()
        return name

    def local_path(self, path: str) -> str:
        """Where the cached bytes of ``path`` are (or would be) on the local disk."""
        return os.path.join(self._root, self._name(path))

    def touch(self, path: str) -> None:
        """``path`` was read now: it is evicted last."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.local_path(path))

    def read(self, path: str, nbytes: int) -> bytes | None:
        """The cached ``nbytes`` bytes of ``path``, or ``None``: not cached, or gone or short since (then evicted).

        A read is a use: the file is evicted last.
        """
        if not self.holds(path):
            return None
        local = self.local_path(path)
        try:
            with open(local, "rb") as file:
                data = file.read(nbytes + 1)
        except OSError:
            data = b""
        if len(data) != nbytes:
            self.evict(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(local)
        return data

    def holds(self, path: str) -> bool:
        """Whether ``path`` is cached, as far as this object knows (another loader may have evicted it)."""
        return self._name(path) in self._held

    def write(self, path: str, data: bytes) -> None:
        """Keep ``data`` as the bytes of ``path``, whole or not at all; then hold to the limit."""
        if len(data) > self.cache.max_size:
            return
        name = self._name(path)
        local = os.path.join(self._root, name)
        partial = os.path.join(self._root, f"{_PARTIAL}{uuid.uuid4().hex}")
        try:
            os.makedirs(self._root, exist_ok=True)
            with open(partial, "wb") as file:
                file.write(data)
            os.replace(partial, local)
        except OSError:  # a full disk: a cache that cannot grow is only slower
            with contextlib.suppress(OSError):
                os.unlink(partial)
            return
        with self._lock:
            self._held.add(name)
            self._written += len(data)
            scan = self._written >= SCAN_FRACTION * self.cache.max_size
            if scan:
                self._written = 0
        if scan:
            self.trim()

    def evict(self, path: str) -> None:
        """Remove the cached bytes of ``path`` (found damaged, or missing)."""
        name = self._name(path)
        with self._lock:
            self._held.discard(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self._root, name))

    def trim(self) -> None:
        """Remove the files read longest ago, of every store in the cache, until it holds at most its limit."""
        files = []
        for entry in Path(self.cache.directory).glob("*/*"):
            try:
                stat = entry.stat()
            except FileNotFoundError:  # evicted by another loader meanwhile
                continue
            files.append((stat.st_mtime, stat.st_size, entry))
        total = sum(size for _, size, _ in files)
        for _, size, entry in sorted(files, key=lambda item: item[0]):
            if total <= self.cache.max_size:
                break
            entry.unlink(missing_ok=True)
            total -= size
            if str(entry.parent) == self._root:
                with self._lock:
                    self._held.discard(entry.name)
