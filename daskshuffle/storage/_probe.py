"""Whether a storage refuses to create a file that exists: probed, not guessed from the URL.

The lock relies on ``If-None-Match: *``, which AWS S3 honours but other
``s3://`` endpoints may ignore: once per bucket an object of daskshuffle's own
name is created twice, and the second must be refused.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from typing import TYPE_CHECKING, Final

from .._errors import DaskShuffleError

if TYPE_CHECKING:
    from ._location import Location

__all__ = ["probe_conditional_writes", "why_unconditional"]

#: The probe object's name: the location's, then this and a random suffix.
PROBE_SUFFIX: Final = ".daskshuffle-probe-"

_lock = threading.Lock()
#: What was found, per (protocol, bucket, options): whether the second create was refused, and if not, why.
_found: dict[tuple[str, str, str], tuple[bool, str]] = {}


def _key(location: Location) -> tuple[str, str, str]:
    return (location.protocol, location.bucket, json.dumps(location.options, sort_keys=True, default=repr))


def probe_conditional_writes(location: Location) -> bool:
    """Whether the storage of ``location`` refuses a second ``pipe_file(..., mode="create")`` of one object.

    Asked once per bucket and options in this process. An error reaching the
    storage raises (:class:`~daskshuffle.StorageAccessError`); any other error
    of the creates means no (an s3fs without ``mode="create"``, a filesystem
    that cannot create exclusively).
    """
    key = _key(location)
    with _lock:  # one probe at a time: two threads asking about one bucket probe it once
        if key not in _found:
            _found[key] = _probe(location)
        return _found[key][0]


def why_unconditional(location: Location) -> str:
    """What the probe of ``location``'s storage found that makes it unconditional (``""`` if not probed, or it is not)."""
    return _found.get(_key(location), (True, ""))[1]


def _probe(location: Location) -> tuple[bool, str]:
    name = PROBE_SUFFIX + uuid.uuid4().hex
    at_bucket = location.path.strip("/") == location.bucket  # a suffix would name another bucket
    probe = location.join(name.lstrip(".")) if at_bucket else location.with_suffix(name)
    fs, path = probe.fs, probe.path
    try:
        for attempt in ("a create", "a second create of one object"):
            try:
                with probe.reaching():
                    fs.pipe_file(path, b"", mode="create")
            except DaskShuffleError:
                raise  # no access: nothing can be written here, lock or not
            except FileExistsError:
                return attempt != "a create", ""  # the second refused: conditional (the first: a name taken, never)
            except Exception as error:
                return False, f"{attempt} with mode='create' failed: {type(error).__name__}: {error}"
        return False, "a second create of one object was not refused (the condition If-None-Match was ignored)"
    finally:  # whatever happened: daskshuffle's own object, removed
        with contextlib.suppress(FileNotFoundError), probe.reaching():
            fs.rm_file(path)
