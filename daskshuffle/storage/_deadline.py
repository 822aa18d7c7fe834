"""A deadline on every request of storage, retries included.

The retries of s3fs and botocore, nested, would try a stalled request for
minutes: it fails instead within :func:`request_deadline`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import inspect
import io
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager as ContextManager
from typing import Any, TypeVar

from fsspec import AbstractFileSystem

from .._compat import on_answers, requests_through
from .._config import float_setting

__all__ = ["Upload", "bounded", "ranged_file", "request_deadline", "within"]

T = TypeVar("T")


def request_deadline(options: Mapping[str, Any] | None) -> float:
    """Seconds a request may go unanswered, retries included, before it fails as storage that does not answer.

    With a read (or connect) timeout in the options of S3 (botocore's
    ``config_kwargs``), one more than the attempts botocore makes times the
    longer timeout: every attempt may wait that long, and one more for the
    backoff between them. botocore makes ``retries.total_max_attempts``
    attempts, or one more than ``retries.max_attempts`` (the retries after the
    first), 5 unless set. Otherwise ``daskshuffle.config``'s ``fetch.timeout``
    (30 s).

    Examples
    --------
    >>> request_deadline({"config_kwargs": {"read_timeout": 3, "retries": {"max_attempts": 2}}})
    12.0
    >>> request_deadline(None)
    30.0
    """
    config = (options or {}).get("config_kwargs") or {}
    timeouts = [float(config[name]) for name in ("read_timeout", "connect_timeout") if config.get(name) is not None]
    if not timeouts:
        return float_setting("fetch.timeout")
    retries = config.get("retries") or {}
    # botocore turns max_attempts into total_max_attempts in the dict it is given, at the first request.
    total = retries.get("total_max_attempts")
    attempts = int(total) if total is not None else int(retries["max_attempts"]) + 1 if "max_attempts" in retries else 5
    return float((attempts + 1) * max(timeouts))


#: The HTTP statuses of the answers to the request of the task running (noted by :func:`_answered`).
_answers: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("daskshuffle_answers", default=None)


def _answered(http_response: Any = None, **_: Any) -> None:
    answers = _answers.get()
    if answers is not None and http_response is not None:
        answers.append(int(http_response.status_code))


async def within(fs: AbstractFileSystem | None, request: Awaitable[T], deadline: float, path: str) -> T:
    """What ``request`` (of ``path``, on ``fs``) returns, or an error if it has not returned in ``deadline`` seconds.

    :class:`TimeoutError` if storage never answered; if it answered with
    errors only, an :class:`OSError` that says so (``EBUSY`` for throttling,
    ``EREMOTEIO`` for server errors, as s3fs's own). The request is cancelled
    either way: a stalled one is not left retrying. Awaited on the event loop
    that runs ``request``: the filesystem's, or zarr's for a zarr store
    (``zarr.core.sync.sync``).

    Examples
    --------
    >>> import asyncio
    >>> asyncio.run(within(None, asyncio.sleep(10), 0.01, "piles.zarr/zarr.json"))
    Traceback (most recent call last):
    ...
    TimeoutError: [Errno 110] no answer to the request of 'piles.zarr/zarr.json' within 0.01 s, retries included
    """
    answers: list[int] = []
    _answers.set(answers)  # this task's context, which the request's task copies
    try:
        if fs is not None:
            await on_answers(fs, _answered)  # s3fs makes its client here: a misspelt option raises
    except BaseException:
        getattr(request, "close", lambda: None)()  # a coroutine never awaited
        raise
    try:
        return await asyncio.wait_for(request, deadline)
    except TimeoutError as error:
        if answers and (answers[-1] == 429 or answers[-1] >= 500):  # retried errors (a 404 is another request's)
            code = errno.EBUSY if answers[-1] in (429, 503) else getattr(errno, "EREMOTEIO", errno.EIO)
            raise OSError(
                code,
                f"{len(answers)} answers with HTTP status {answers[-1]} to the request of {path!r} "
                f"(throttled or failing) within {deadline:g} s, retries included",
            ) from error
        raise TimeoutError(
            errno.ETIMEDOUT, f"no answer to the request of {path!r} within {deadline:g} s, retries included"
        ) from error


def bounded(fs: AbstractFileSystem, name: str, *args: Any, what: str, **kwargs: Any) -> Any:
    """``fs.<name>(*args, **kwargs)``, one request (or one batch of them) of ``what``, within :func:`request_deadline`.

    On an asynchronous filesystem the call is its coroutine (``fs._<name>``)
    on the filesystem's event loop, awaited :func:`within` the deadline of the
    filesystem's options; on any other, the call as it is.

    Examples
    --------
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe_file("/bounded-demo/zarr.json", b"{}")
    >>> bounded(fs, "cat_file", "/bounded-demo/zarr.json", what="zarr.json")
    b'{}'
    """
    if not getattr(fs, "async_impl", False):
        return getattr(fs, name)(*args, **kwargs)
    deadline = request_deadline(getattr(fs, "storage_options", None))

    async def request() -> Any:  # the request's coroutine made on the loop, where it is awaited
        return await within(fs, getattr(fs, f"_{name}")(*args, **kwargs), deadline, what)

    # Not fsspec's sync, which raises a bare FSTimeoutError for any TimeoutError, the message lost.
    return asyncio.run_coroutine_threadsafe(request(), fs.loop).result()


class _BoundedCalls:
    """``fs`` as a file of it sees it: each call that is a request (has an ``async`` twin) within the deadline."""

    def __init__(self, fs: AbstractFileSystem, path: str) -> None:
        self._fs, self._path = fs, path

    def __getattr__(self, name: str) -> Any:
        if inspect.iscoroutinefunction(getattr(self._fs, f"_{name}", None)):
            return lambda *args, **kwargs: bounded(self._fs, name, *args, what=self._path, **kwargs)
        return getattr(self._fs, name)


class Upload(io.RawIOBase):
    """``path`` on ``fs`` written a part at a time, as ``fs.open(path, "wb")`` buffers it (s3fs: 50 MiB at a time),
    there only if the ``with`` block ends without error.

    On an asynchronous filesystem (s3fs), each request (a part, the one that
    completes the upload) is made :func:`within` :func:`request_deadline`, not
    the whole file: a file of any size can be written, and a stalled request
    fails as :class:`TimeoutError`. At the first failure, or an error in the
    block, the upload is aborted and no request follows but the abort.
    """

    def __init__(self, fs: AbstractFileSystem, path: str) -> None:
        self._file, self._failed = fs.open(path, "wb"), False
        if getattr(fs, "async_impl", False):
            requests_through(self._file, _BoundedCalls(fs, path))

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return int(self._file.tell())

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is not None:  # an error in the block: the file is not made
            self.abandon()
        self.close()

    def write(self, data: Any) -> int:
        if self._failed:
            raise OSError(errno.EIO, f"the upload of {self._file.path!r} failed already")
        try:
            return int(self._file.write(data))
        except BaseException:
            self.abandon()
            raise

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self._failed:
                self._file.close()  # the last part, and the request that completes the upload
        except BaseException:
            self.abandon()
            raise
        finally:
            super().close()

    def abandon(self) -> None:
        """Give up: abort the upload (an object store keeps nothing of it), within the deadline."""
        if not self._failed:
            self._failed = True
            # The error that made us give up is the one to raise.
            with contextlib.suppress(Exception):  # an fsspec buffered file: never flushed when collected
                self._file.closed = True
            with contextlib.suppress(Exception):
                self._file.discard()


class _Ranges(io.RawIOBase):
    """A file of ``size`` bytes on ``fs`` whose every read is one ranged request, within the deadline, inside
    ``named()`` (a context that names a failure)."""

    def __init__(self, fs: AbstractFileSystem, path: str, size: int, named: Callable[[], ContextManager[Any]]) -> None:
        self._fs, self._path, self._size, self._named, self._position = fs, path, size, named, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._position = max(0, offset + (0, self._position, self._size)[whence])
        return self._position

    def readinto(self, buffer: Any) -> int:
        stop = min(self._position + len(buffer), self._size)
        if stop <= self._position:
            return 0
        with self._named():  # By keyword: s3fs's second positional is a version id.
            data = bounded(self._fs, "cat_file", self._path, start=self._position, end=stop, what=self._path)
        memoryview(buffer).cast("B")[: len(data)] = data
        self._position += len(data)
        return len(data)


class _Reading(io.BufferedReader):
    """A buffered :class:`_Ranges`: pickled, it is opened again at its position (by a task elsewhere); dask tokenizes
    it by its file."""

    def __init__(self, raw: _Ranges, buffer_nbytes: int) -> None:
        super().__init__(raw, buffer_size=buffer_nbytes)
        self._ranges, self._buffer_nbytes = raw, buffer_nbytes

    def __reduce__(self) -> tuple[Any, ...]:
        raw = self._ranges
        arguments = (raw._fs, raw._path, raw._size, raw._named, self._buffer_nbytes, self.tell())
        return (ranged_file, arguments)

    def __dask_tokenize__(self) -> tuple[str, str, int]:
        return ("daskshuffle.reading", self._ranges._fs.unstrip_protocol(self._ranges._path), self._ranges._size)


def ranged_file(
    fs: AbstractFileSystem, path: str, size: int, named: Callable[[], ContextManager[Any]], nbytes: int, at: int = 0
) -> _Reading:
    """A :class:`_Reading` of ``path`` on ``fs`` (an asynchronous filesystem), buffered ``nbytes`` at a time, at ``at``."""
    file = _Reading(_Ranges(fs, path, size, named), nbytes)
    file.seek(at)
    return file
