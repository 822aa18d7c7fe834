"""A local cache of a remote pile store's files, for the epochs after the first.

The cache owns its directory and only its own names in it, follows no link
(every look below the directory is by name from an open directory), and
trusts nothing it holds: a cached file is checked as a fetched one is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import threading
import time
import uuid
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

from .._errors import DaskShuffleError, DaskShuffleTypeError, DaskShuffleValueError
from .._parse import parse_nbytes
from . import _own

__all__ = ["Cache", "StoreCache", "parse_cache"]

#: The cache's limit unless one is given.
DEFAULT_MAX_SIZE = 10 * 2**30
#: Files written between two looks at the whole cache's size, as a fraction of the limit.
SCAN_FRACTION = 0.05
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


@dataclass(frozen=True)
class Cache:
    """A directory on a local disk where a loader keeps the files of a remote pile store.

    The cache owns the directory: it must be missing, empty, or a cache's
    already (marked by a ``.daskshuffle-cache`` file the cache writes). Inside
    it removes only files it wrote, by the names it gives them, and never
    follows a symbolic link.

    Parameters
    ----------
    directory : path
        Where the files go (made if missing). Loaders on one machine may share it.
    max_size : int or str, default "10GiB"
        The most bytes the cache holds: past it, the files read longest ago are removed.

    Raises
    ------
    DaskShuffleValueError
        If ``directory`` is a file, lies below one, may not be written, or holds
        files a cache did not make.

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
        object.__setattr__(self, "max_size", parse_nbytes(max_size, "max_size"))
        # A link given as the directory is the user's choice, followed once here; nothing below it is followed.
        path = os.path.realpath(os.path.expanduser(path))
        check_directory(path)
        object.__setattr__(self, "directory", path)


def parse_cache(value: Any) -> Cache | None:
    """``cache=`` as a :class:`Cache`: ``None``, a directory, or a ``Cache``."""
    return value if value is None or isinstance(value, Cache) else Cache(value)


@dataclass
class StoreCache:
    """The cached files of the store of ``fingerprint`` in ``cache``: read, written and evicted by the store's paths.

    Safe across threads. Raises :class:`~daskshuffle.DaskShuffleError` if the
    directory cannot be used (any more) as the cache's own.

    What the cache holds is listed once, when it is opened, and kept up to
    date with what this object writes and evicts: :meth:`holds` costs no look
    at the disk. A file that another loader evicted since is found missing
    when it is read, and fetched then. Every file is reached by name from the
    open directory of the store, never through a link.
    """

    cache: Cache
    fingerprint: str
    _root: int = field(default=-1, init=False)
    _store: int = field(default=-1, init=False)
    _digest: str = field(default="", init=False)
    _held: set[str] = field(default_factory=set, init=False)
    _written: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(self.fingerprint.encode()).hexdigest()[:32]
        if os.open not in os.supports_dir_fd:
            raise DaskShuffleValueError(
                "Expected a system that opens files relative to a directory, which the cache needs to follow no "
                "link. Got one that cannot instead; pass cache=None.",
                parameter="cache",
            )
        try:
            self._root = claim(self.cache.directory)
        except DaskShuffleError:
            raise
        except OSError as error:
            raise refused(self.cache.directory, f"which cannot be used ({error})", "pass another.") from None
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(digest, dir_fd=self._root)
            try:
                self._store = os.open(digest, DIRECTORY_FLAGS, dir_fd=self._root)
            except OSError as error:  # a link or a file placed at the store's name
                path = os.path.join(self.cache.directory, digest)
                raise _own.unsafe(path, "a cache's directory of a store", _own.found_at(path) or "a file") from error
        except BaseException:
            close(self._root)
            raise
        self._digest = digest
        weakref.finalize(self, close, self._root, self._store)
        self._held = {name for name in os.listdir(self._store) if FILE_NAME.fullmatch(name) and self._regular(name)}

    def __getstate__(self) -> dict[str, Any]:
        return {"cache": self.cache, "fingerprint": self.fingerprint}

    def __setstate__(self, state: dict[str, Any]) -> None:
        try:
            self.__init__(**state)  # type: ignore[misc]
        except (DaskShuffleError, OSError) as error:  # in a process of its own (a DataLoader worker): read without
            warnings.warn(f"The cache is not used: {error}", UserWarning, stacklevel=2)
            self._root = self._store = -1  # a cache that holds nothing and keeps nothing (closed, if opened)

    @staticmethod
    def _name(path: str) -> str:
        # The store's own path is not a safe local name (a URL, a key with any characters): a digest is.
        return hashlib.sha256(path.encode()).hexdigest()

    def _regular(self, name: str, missing: bool = False) -> bool:
        """Whether ``name`` in the store's directory is a regular file, not a link or anything else (absent: ``missing``)."""
        try:
            mode = os.stat(name, dir_fd=self._store, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return missing
        except OSError:
            return False
        return stat.S_ISREG(mode)

    def open(self, path: str) -> int | None:
        """A descriptor of the cached bytes of ``path``, open for reading (the caller closes it); ``None`` if absent.

        A link or anything but a regular file at its name is not opened.
        """
        if self._store < 0 or not self.holds(path):
            return None
        try:
            return _own.open_file(self._name(path), os.O_RDONLY, "a cached file", dir_fd=self._store)
        except (OSError, DaskShuffleError):
            with self._lock:
                self._held.discard(self._name(path))
            return None

    def touch(self, path: str) -> None:
        """``path`` was read now: it is evicted last."""
        if self._store < 0:
            return
        with contextlib.suppress(OSError):
            os.utime(self._name(path), dir_fd=self._store, follow_symlinks=False)

    def read(self, path: str, nbytes: int) -> bytes | None:
        """The cached ``nbytes`` bytes of ``path``, or ``None``: not cached, or gone or short since (then evicted).

        A read is a use: the file is evicted last.
        """
        fd = self.open(path)
        if fd is None:
            return None
        try:
            data = os.pread(fd, nbytes + 1, 0)
        except OSError:
            data = b""
        finally:
            os.close(fd)
        if len(data) != nbytes:
            self.evict(path)
            return None
        self.touch(path)
        return data

    def holds(self, path: str) -> bool:
        """Whether ``path`` is cached, as far as this object knows (another loader may have evicted it)."""
        return self._name(path) in self._held

    def write(self, path: str, data: bytes) -> None:
        """Keep ``data`` as the bytes of ``path``, whole or not at all; then hold to the limit."""
        if len(data) > self.cache.max_size or self._store < 0:
            return
        name = self._name(path)
        partial = f"{PARTIAL}{uuid.uuid4().hex}"
        try:
            with os.fdopen(
                _own.open_file(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, "a cached file", dir_fd=self._store),
                "wb",
            ) as file:
                file.write(data)
            if self._regular(name, missing=True):  # never over what someone else put there
                os.replace(partial, name, src_dir_fd=self._store, dst_dir_fd=self._store)
        except (OSError, DaskShuffleError):  # a full disk, a removed directory: a cache that cannot grow is slower
            pass
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=self._store)  # left only if it was not renamed
        if not self._regular(name):
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
        """Remove the cached bytes of ``path`` (found damaged, or missing); only a file the cache wrote."""
        name = self._name(path)
        with self._lock:
            self._held.discard(name)
        if self._store >= 0 and self._regular(name):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self._store)

    def trim(self) -> None:
        """Remove the files read longest ago, of every store in the cache, until it holds at most its limit.

        Only the cache's own names are looked at (its stores' directories, their
        files), each without following a link; a file being written that a
        killed loader left goes too.
        """
        if self._root < 0:
            return
        files, opened = listed(self._root, self._digest, self._store)
        try:
            total = sum(size for _, size, _, _ in files)
            for _, size, directory, name in sorted(files, key=lambda item: item[0]):
                if total <= self.cache.max_size:
                    break
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=directory)
                total -= size
                if directory == self._store:
                    with self._lock:
                        self._held.discard(name)
        finally:
            close(*opened)


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
