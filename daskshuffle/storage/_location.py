"""One storage location and the requests made there, built once at the public boundary (:meth:`Location.of`) and
taken by everything below it, as zarr's ``StorePath`` is; what it is (URL, options, filesystem, naming) is its base,
:class:`~daskshuffle.storage._place.Place`."""

from __future__ import annotations

import contextlib
import functools
import glob
import io
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .._errors import DaskShuffleError, DaskShuffleValueError, StorageAccessError, StorageNotFoundError
from . import _own
from ._deadline import Upload, bounded, ranged_file
from ._place import Place

__all__ = ["Location", "glob_matches", "unreached", "why_unconditional"]

_REMOVE_ATTEMPTS = 5


@dataclass(frozen=True)
class Location(Place):
    """A place in a filesystem (:class:`~daskshuffle.storage._place.Place`) and the requests made there.

    Build one with :meth:`Location.of`; :meth:`join` and :meth:`with_suffix`
    make the locations below and beside it, with the same options.

    Examples
    --------
    >>> store = Location.of("memory://data/piles.zarr")
    >>> store.url, store.path, store.is_local
    ('memory:///data/piles.zarr', '/data/piles.zarr', False)
    >>> str(store.join("x"))
    'memory:///data/piles.zarr/x'
    >>> str(store.with_suffix(".daskshuffle-lock"))
    'memory:///data/piles.zarr.daskshuffle-lock'
    """

    @functools.cached_property
    def conditional_writes(self) -> bool:
        """Whether the storage refuses to create a file that exists (``pipe_file(mode="create")``, ``If-None-Match: *``).

        Probed once per bucket and options in this process (an object of
        daskshuffle's own name created twice), never guessed from the URL;
        ``False`` for a local disk and ``memory://``, where the lock excludes
        writers by other means. An error reaching the storage raises
        :class:`~daskshuffle.StorageAccessError`; any other error of the
        creates means no (an s3fs without ``mode="create"``).
        """
        if self.is_local or self.protocol == "memory":
            return False
        key = _key(self)
        with _probing:  # one probe at a time: two threads asking about one bucket probe it once
            if key not in _found:
                _found[key] = _probe(self)
        return _found[key][0]

    def request(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``fs.<name>(path, *args, **kwargs)`` here, within the request deadline, a failure named by :meth:`reaching`."""
        with self.reaching():
            return bounded(self.fs, name, self.path, *args, what=self.path, **kwargs)

    def exists(self) -> bool:
        """Whether something is here; a failure to reach the storage raises :class:`StorageAccessError` naming it."""
        return bool(self.request("exists"))

    def info(self) -> dict[str, Any] | None:
        """fsspec's info of what is here (its ``type`` and ``size``), or ``None`` if nothing is: one request."""
        try:
            return dict(self.request("info"))
        except FileNotFoundError:
            return None

    def names(self, *, fresh: bool = False) -> list[str]:
        """The names of what is directly below the directory here, sorted (none if nothing is here): one listing.

        ``fresh``: asked of the storage, not of what fsspec's listings cache holds (another process writes here).

        Examples
        --------
        >>> import fsspec
        >>> fsspec.filesystem("memory").pipe_file("/names-demo/writes/0", b"")
        >>> Location.of("memory://names-demo").names(), Location.of("memory://names-demo/none").names()
        (['writes'], [])
        """
        if fresh:
            self.fs.invalidate_cache(self.path)
        try:
            return sorted(path.rstrip("/").rsplit("/", 1)[-1] for path in self.request("ls", detail=False))
        except FileNotFoundError:
            return []

    def placed(self) -> bool:
        """Whether a link (or FIFO, ...) someone else placed is here, on a local disk: never the library's, never removed."""
        return self.is_local and _own.found_at(self.path) is not None

    def isdir(self) -> bool:
        """Whether this is a directory (a prefix with objects below it, on an object store)."""
        return bool(self.request("isdir"))

    def nbytes(self) -> int:
        """Bytes of the file here, or of every file below the directory here."""
        return int(self.request("du", total=True)) if self.isdir() else int(self.request("size") or 0)

    def check(self, name: str, *, bucket_known: bool = False) -> bool:
        """Before anything is written: the credentials are accepted and, on an object store, the bucket exists.

        Returns whether something is here already. ``name`` is the parameter
        the location came from, for the error. The bucket is asked for only if
        nothing is here and ``bucket_known`` is false (each look is a request).
        daskshuffle never creates a bucket.
        """
        found_here = self.exists()  # refused credentials are named here
        if found_here or bucket_known or not self.is_object_store:
            return found_here
        bucket = self.bucket
        with self.reaching():
            found = bool(bounded(self.fs, "exists", bucket, what=bucket))
        if not found:
            raise StorageNotFoundError(
                f"Expected the bucket of {name} to exist. Got {self.url!r}, whose bucket {bucket!r} does not exist "
                "(or these credentials cannot see it), instead; create the bucket first, or check the URL and "
                "storage_options.",
                parameter=name,
            )
        return False

    def write_whole(self, data: bytes | memoryview) -> None:
        """Write the file here at once: a reader sees the old file or the new one, never half of it.

        On a local disk the bytes go to a staged file beside it, renamed over
        it; elsewhere one put is that already (one request on an object store,
        within the request deadline).
        """
        staged = f"{self.path}.partial"
        if self.is_local:  # never written through a link placed at the staged name
            with _own.open_writer(staged, "a file being written") as file:
                file.write(data)
            os.replace(staged, self.path)
            return
        self.request("pipe_file", bytes(data))  # botocore takes bytes, not a view

    @contextlib.contextmanager
    def writing(self) -> Iterator[Any]:
        """A file that writes here a part at a time (:class:`~daskshuffle.storage._deadline.Upload`), made only if
        the body ends without error; a failure to reach the storage named by :meth:`reaching`.

        Examples
        --------
        >>> with Location.of("memory://writing-demo/part-0").writing() as file:
        ...     _ = file.write(b"rows")
        >>> Location.of("memory://writing-demo/part-0").fs.cat_file("/writing-demo/part-0")
        b'rows'
        """
        with self.reaching(), Upload(self.fs, self.path) as file:
            yield file

    @contextlib.contextmanager
    def reading(self, size: int | None = None, *, buffer_nbytes: int = 2**16) -> Iterator[io.BufferedIOBase]:
        """The file here opened for reading (:meth:`opened`), closed at the end, a failure to reach the storage in
        the body named by :meth:`reaching`."""
        with self.reaching(), self.opened(size, buffer_nbytes=buffer_nbytes) as file:
            yield file

    def opened(self, size: int | None = None, *, buffer_nbytes: int = 2**16) -> io.BufferedIOBase:
        """The file here opened for reading, buffered ``buffer_nbytes`` at a time.

        On an asynchronous filesystem (object storage), each read that the
        buffer does not hold is one ranged request (a read of more than
        ``buffer_nbytes``, one request of its bytes) within the request
        deadline, its failure named by :meth:`reaching`: a stalled request
        fails as :class:`TimeoutError` in
        :func:`~daskshuffle.storage._deadline.request_deadline`. Such a file
        holds no connection, for a reader that keeps it (an xarray dataset),
        and pickles as the same file opened again at its position (a task
        elsewhere). ``size``: its bytes, if known (else one request more). On
        any other filesystem, ``fs.open(path, "rb")`` as it is.
        """
        if not getattr(self.fs, "async_impl", False):
            with self.reaching():
                file: io.BufferedIOBase = self.fs.open(self.path, "rb")
            return file
        size = int(self.request("size")) if size is None else size
        return ranged_file(self.fs, self.path, size, self.reaching, buffer_nbytes)

    def makedirs(self) -> None:
        """Make the directory here and its parents, if missing (nothing to make on an object store)."""
        self.request("makedirs", exist_ok=True)

    def remove(self) -> None:
        """Remove what is here and everything below it, if it exists.

        A local symbolic link here was placed by someone else (the library
        makes none): it is refused with :class:`~daskshuffle.UnsafePathError`
        and left, as is what it points to. Links below a directory removed here
        are removed themselves, never followed.
        """
        if self.is_local:
            _own.refuse(self.path, "a file or directory")
        for attempt in range(_REMOVE_ATTEMPTS):
            if not self.exists():
                return
            try:
                self.request("rm", recursive=True)
                return
            except DaskShuffleError:
                raise  # the storage's own retries are spent: named, not tried again
            except OSError:
                # A cancelled task on a cluster may still be finishing a write below
                # here; give it a moment, then try again.
                if attempt == _REMOVE_ATTEMPTS - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))


def glob_matches(location: Location) -> dict[str, dict[str, Any]] | None:
    """What ``location`` names as a glob: fsspec's info of each match, by path in sorted order; ``None`` if it names itself.

    The one rule of every source that takes globs: a path that exists is
    itself, whatever characters its name holds (``data[1].txt``); one that
    does not, holding ``*``, ``?`` or ``[``, is a glob (one listing more).
    A path without those characters costs no request here.
    """
    if not glob.has_magic(location.path) or location.exists():
        return None
    return dict(sorted(location.request("glob", detail=True).items()))


def unreached(locations: Sequence[Location]) -> list[tuple[str, str, str]]:
    """The locations of ``locations`` that this process cannot reach: ``(url, reason, what went wrong)`` for each.

    ``reason`` is a :class:`~daskshuffle.StorageAccessError`'s, or
    ``"options"`` for a storage option the filesystem does not take. Run on
    each worker of a cluster before it reads or writes them: a worker takes
    credentials from the call's ``storage_options`` or from its own
    environment, which is not this process's.
    """
    failed = []
    for location in locations:
        try:
            location.exists()
        except StorageAccessError as error:  # what went wrong: its cause, if it has one
            failed.append((location.url, error.reason, str(error.__cause__ or error)))
        except DaskShuffleValueError as error:
            failed.append((location.url, "options", str(error)))
    return failed


# Location.conditional_writes: the lock relies on If-None-Match, which AWS S3 honours but other s3:// endpoints may
# ignore. The probe object's name: the location's, then this and a random suffix.
PROBE_SUFFIX: Final = ".daskshuffle-probe-"

_probing = threading.Lock()
#: What was found, per (protocol, bucket, options): whether the second create was refused, and if not, why.
_found: dict[tuple[str, str, str], tuple[bool, str]] = {}


def _key(location: Location) -> tuple[str, str, str]:
    return (location.protocol, location.bucket, json.dumps(location.options, sort_keys=True, default=repr))


def why_unconditional(location: Location) -> str:
    """What the probe of ``location``'s storage found that makes it unconditional (``""`` if not probed, or it is not)."""
    return _found.get(_key(location), (True, ""))[1]


def _probe(location: Location) -> tuple[bool, str]:
    name = PROBE_SUFFIX + uuid.uuid4().hex
    at_bucket = location.path.strip("/") == location.bucket  # a suffix would name another bucket
    probe = location.join(name.lstrip(".")) if at_bucket else location.with_suffix(name)
    try:
        for attempt in ("a create", "a second create of one object"):
            try:
                probe.request("pipe_file", b"", mode="create")
            except DaskShuffleError:
                raise  # no access: nothing can be written here, lock or not
            except FileExistsError:
                return attempt != "a create", ""  # the second refused: conditional (the first: a name taken, never)
            except Exception as error:
                return False, f"{attempt} with mode='create' failed: {type(error).__name__}: {error}"
        return False, "a second create of one object was not refused (the condition If-None-Match was ignored)"
    finally:  # whatever happened: daskshuffle's own object, removed
        with contextlib.suppress(FileNotFoundError):
            probe.request("rm_file")
