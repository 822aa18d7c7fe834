"""One writer at a time into a destination: the lock ``<dst>.daskshuffle-lock`` beside it.

Two shuffles writing one destination would write over each other's store. How
the lock excludes depends on the storage (``docs/storage.md``, "Two shuffles
into one destination"); it records its holder, so that a run refused names it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

from .._errors import DaskShuffleError, DaskShuffleValueError, StorageAccessError
from . import _own
from ._crash import crash_point
from ._location import Location, why_unconditional

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_SUFFIX", "describe", "exclusive", "held", "read_holder"]

LOCK_SUFFIX = ".daskshuffle-lock"
#: How long a refused run waits for the holder to finish writing its name into a lock it just created.
_NAME_WAIT = 1.0
_in_memory = threading.Lock()
_warned: set[str] = set()
#: Protocols whose filesystems pass ``IfMatch=<ETag>`` to the store (s3fs, to ``put_object``).
_IF_MATCH = frozenset({"s3", "s3a"})


def _stale(holder: dict[str, Any]) -> bool:
    """A lock whose process is gone: it ran on this host and that process no longer runs."""
    if holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder.get("pid", 0)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # someone else's process: alive
        return False
    return False


def read_holder(lock: Location) -> dict[str, Any] | None:
    """What the lock file ``lock`` records, held or left behind (``None`` if there is none, or something placed there:
    a link or FIFO is never read)."""
    if lock.placed():
        return None
    try:
        found = json.loads(lock.request("cat_file"))
    except (FileNotFoundError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _named(lock: Location) -> dict[str, Any]:
    """The holder a lock records, waiting a moment for a holder that has just created it to write its name."""
    deadline = time.monotonic() + _NAME_WAIT
    while (found := read_holder(lock)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return found or {}


def held(dst: Location) -> bool:
    """Whether a run holds the lock of ``dst`` now (``False`` for a lock a killed run left)."""
    lock = dst.with_suffix(LOCK_SUFFIX)
    if not lock.is_local or fcntl is None:
        holder = read_holder(lock)
        return holder is not None and not _stale(holder)
    inner = lock.path
    try:
        fd = os.open(inner, os.O_RDONLY | _own.NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # no lock, or a link or a FIFO placed there: no run of daskshuffle holds it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def describe(holder: dict[str, Any]) -> str:
    """``process 123 on 'host', since 2026-01-02 03:04:05``, from what a lock records."""
    if not holder:
        return "a run that has not yet written its name into the lock"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("since", 0))))
    return f"process {holder.get('pid')} on {holder.get('host')!r}, since {since}"


def _refuse(lock: Location, holder: dict[str, Any] | None = None, *, by_hand: bool = True) -> DaskShuffleValueError:
    """The error for a run refused by ``lock``, naming ``holder`` (by default, who ``lock`` names)."""
    holder = _named(lock) if holder is None else holder
    advice = f"wait for it to end, or, if it is gone, remove {lock.url!r}" if by_hand else "wait for it to end"
    return DaskShuffleValueError(
        f"Expected no other shuffle writing {lock.url.removesuffix(LOCK_SUFFIX)!r}. Got one instead: "
        f"{describe(holder)}; {advice}.",
        parameter="dst",
    )


@contextlib.contextmanager
def exclusive(where: Location) -> Iterator[None]:
    """Hold the lock of ``where`` for the body; refuse if another live run holds it."""
    lock = where.with_suffix(LOCK_SUFFIX)
    ours = {"run": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
    if lock.is_local and fcntl is not None:
        with _named_local_errors(where), _flocked(lock, ours):
            yield
        return
    in_memory = lock.protocol == "memory"
    if lock.is_local:
        with _named_local_errors(where):
            _create_local(lock, ours)
    elif in_memory:
        with _in_memory:
            _create_by_reading_back(lock, ours)
    elif where.conditional_writes:
        _create_conditionally(lock, ours)
    else:
        _warn_unexcluded(where)
        _create_by_reading_back(lock, ours)
    try:
        yield
    finally:
        with _in_memory if in_memory else contextlib.nullcontext():
            if (read_holder(lock) or {}).get("run") == ours["run"]:  # nobody takes over a live run's lock
                with contextlib.suppress(FileNotFoundError):
                    lock.request("rm_file")


#: What the local filesystem says when a directory may not be written: no permission, or mounted read-only.
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}


@contextlib.contextmanager
def _named_local_errors(where: Location) -> Iterator[None]:
    """Name the user's path and what to do when the local lock of ``where`` may not be taken (not writable, name too long)."""
    try:
        yield
    except OSError as error:
        if isinstance(error, DaskShuffleError) or error.filename != where.with_suffix(LOCK_SUFFIX).path:
            raise
        parent = os.path.dirname(where.path) or "."
        if error.errno in _NOT_WRITABLE:
            raise StorageAccessError(
                f"Expected a directory that daskshuffle may write beside {where.url!r}: its lock and scratch "
                f"directories go there. Got {error.strerror} on {error.filename!r} instead; make {parent!r} "
                "writable, or choose a destination in a directory you may write.",
                parameter="dst",
                reason="refused",
                url=where.url,
            ) from error
        if error.errno == errno.ENAMETOOLONG:
            raise name_too_long(where) from error
        raise


def name_too_long(where: Location) -> DaskShuffleValueError:
    """The error for a local destination whose name leaves no room for the names daskshuffle writes beside it."""
    name = os.path.basename(where.path)
    return DaskShuffleValueError(
        f"Expected a destination whose name leaves room for the names daskshuffle writes beside it (such as "
        f"{name[:20]}...{LOCK_SUFFIX}). Got a name of {len(os.fsencode(name))} bytes in "
        f"{os.path.dirname(where.path)!r} instead, too long for its filesystem; choose a shorter name.",
        parameter="dst",
    )


@contextlib.contextmanager
def _flocked(lock: Location, ours: dict[str, Any]) -> Iterator[None]:
    assert fcntl is not None  # for the type checker: the caller checked
    inner = lock.path
    os.makedirs(os.path.dirname(inner) or ".", exist_ok=True)
    while True:
        # Never through a link placed at the lock's path: truncated and written, it would damage what it names.
        fd = _own.open_file(inner, os.O_RDWR | os.O_CREAT, "a lock file")
        try:
            crash_point("lock opened")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _refuse(lock, by_hand=False) from None
            locked = os.fstat(fd)
            with contextlib.suppress(FileNotFoundError):
                there = os.stat(inner)
                if (there.st_dev, there.st_ino) == (locked.st_dev, locked.st_ino):
                    break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it as we locked it: lock the file there now
    try:
        os.ftruncate(fd, 0)  # a lock a killed run left records that run
        os.write(fd, json.dumps(ours).encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            there = os.lstat(inner)
            if (there.st_dev, there.st_ino) == (locked.st_dev, locked.st_ino):  # ours, not what replaced it
                os.remove(inner)  # still locked: a run that opened it meanwhile finds it gone, and starts again
        os.close(fd)


def _create_local(lock: Location, ours: dict[str, Any]) -> None:
    """Without ``flock``: an exclusive create, and a lock left behind is named, to be removed by hand."""
    inner = lock.path
    os.makedirs(os.path.dirname(inner) or ".", exist_ok=True)
    _own.refuse(inner, "a lock file")
    try:
        with open(inner, "x") as file:
            file.write(json.dumps(ours))
    except FileExistsError:
        raise _refuse(lock) from None


def _create_conditionally(lock: Location, ours: dict[str, Any]) -> None:
    """Create with ``If-None-Match: *``; replace a lock its killed process left with ``If-Match: <ETag>`` (S3)."""
    text = json.dumps(ours).encode()
    for _ in range(3):  # a lock removed while we look at it: try again
        try:
            lock.request("pipe_file", text, mode="create")
            return
        except FileExistsError:
            pass
        lock.fs.invalidate_cache(lock.path)
        info = lock.info()  # the ETag before the contents: a write after this changes it, and If-Match fails
        if info is None:
            continue
        holder = _named(lock)
        if not (lock.protocol in _IF_MATCH and _stale(holder)):
            raise _refuse(lock, holder)
        crash_point("lock stale")
        try:
            lock.request("pipe_file", text, IfMatch=info["ETag"])
            return
        except FileNotFoundError:
            continue
        except OSError as error:  # 412 Precondition Failed: another run replaced it first
            if error.errno != errno.EINVAL:
                raise
            raise _refuse(lock) from None
    raise _refuse(lock)


def _create_by_reading_back(lock: Location, ours: dict[str, Any]) -> None:
    found = read_holder(lock)
    if found is not None and not _stale(found):
        raise _refuse(lock, found)
    lock.write_whole(json.dumps(ours).encode())
    if (found := read_holder(lock) or {}).get("run") != ours["run"]:
        raise _refuse(lock, found)


def _warn_unexcluded(where: Location) -> None:
    key = f"{type(where.fs).__name__} {where.protocol}://{where.bucket}"
    if key in _warned:
        return
    _warned.add(key)
    found = why_unconditional(where)
    warnings.warn(
        f"{type(where.fs).__name__} offers no conditional write at {where.protocol}://{where.bucket}"
        + (f" ({found})" if found else "")
        + ": daskshuffle's lock names a run that started earlier but does not keep two runs that start at the "
        "same moment from writing one destination; start one at a time.",
        UserWarning,
        stacklevel=4,
    )
