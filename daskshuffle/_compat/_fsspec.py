"""fsspec's internals: the filesystems its instance caches hold, the answers s3fs's client gets, a file's requests.

No public API lists the instances (``_cache`` of each class), s3fs's client
(``_s3``), routes a file's requests (``fs`` of a buffered file), or gives the
filesystem zarr wrapped to make it asynchronous (``sync_fs``). Checked against fsspec and s3fs 2026.9 (:data:`CHECKED`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["CHECKED", "cached_filesystems", "made_with", "on_answers", "requests_through"]

#: The versions (major.minor) each function here was checked against.
CHECKED: dict[str, tuple[str, ...]] = {"fsspec": ("2026.9",), "s3fs": ("2026.9",)}


def cached_filesystems(base: type) -> list[object]:
    """Every instance in the instance caches of ``base`` and its subclasses.

    A class without a cache (another fsspec) contributes none.

    Parameters
    ----------
    base
        ``fsspec.AbstractFileSystem``, or one of its subclasses.

    Examples
    --------
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> any(found is fs for found in cached_filesystems(fsspec.AbstractFileSystem))
    True
    """
    found: list[object] = []
    classes: list[type] = [base]
    for cls in classes:  # grows as it goes: every subclass once
        subclasses: list[type] = cls.__subclasses__()
        classes += [subclass for subclass in subclasses if subclass not in classes]
        found.extend(cls.__dict__.get("_cache", {}).values())
    return found


def made_with(fs: object) -> dict[str, Any]:
    """The options ``fs`` was made with, as a synchronous filesystem of its kind takes them (no ``asynchronous``).

    zarr makes a synchronous filesystem asynchronous by wrapping it (fsspec's
    ``AsyncFileSystemWrapper``): the options are those of the one it wraps.

    Examples
    --------
    >>> import zarr
    >>> made_with(zarr.storage.FsspecStore.from_url("memory://made-with-demo").fs)
    {}
    """
    wrapped = getattr(fs, "sync_fs", fs)
    options: dict[str, Any] = getattr(wrapped, "storage_options", None) or {}
    return {key: value for key, value in options.items() if key != "asynchronous"}


async def on_answers(fs: object, handler: Callable[..., Any]) -> bool:
    """Have ``handler(http_response=..., **more)`` called for each answer storage gives ``fs``; whether it can be.

    On s3fs, an answer is botocore's ``after-call.s3`` event of its client,
    emitted in the task that made the request, for an error's answer too
    (a 503 ``SlowDown``), never for a request that timed out. The client is
    made first if s3fs has not made it yet (no request); on any other
    filesystem, nothing is registered (``False``). Registering again is
    harmless (one ``unique_id``). Awaited on the filesystem's event loop.

    Examples
    --------
    >>> import asyncio, fsspec
    >>> asyncio.run(on_answers(fsspec.filesystem("memory"), print))
    False
    """
    set_session = getattr(fs, "set_session", None)
    if set_session is not None and getattr(fs, "async_impl", False) and vars(fs).get("_s3") is None:
        await set_session()
    client = vars(fs).get("_s3")
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is None:
        return False
    events.register("after-call.s3", handler, unique_id=f"daskshuffle-answers-{id(handler)}")
    return True


def requests_through(file: Any, calls: object) -> None:
    """Have ``file``, an fsspec buffered file being written, make its requests through ``calls``.

    s3fs's ``S3File`` starts, sends each part of and completes an upload
    through its filesystem's synchronous methods (``file.fs.call_s3``), which
    no public API lets one bound: ``calls`` stands in for that filesystem.
    """
    file.fs = calls
