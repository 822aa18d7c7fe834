"""Where a shuffle writes: its destination and scratch space, checked before anything is written.

A store that replaces an existing destination is built at ``<dst>.daskshuffle-new``
and moved into place once complete. On a cluster, the workers must see every local path.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Sequence
from typing import Any

from .._errors import Argument, DaskShuffleValueError, PileStoreExistsError, StorageNotFoundError
from ..storage import Location, _leftovers, _own, _paths, access_error, unreached
from ._compute import on_every_worker, workers_not_seeing
from ._options import ShuffleOptions

__all__ = [
    "build_path",
    "check_destination",
    "check_workers_access",
    "check_workers_reach",
    "exists_error",
    "local_pieces",
    "remove_if_empty",
    "shuffle_locations",
]

#: The room a local disk must have, as a multiple of the data, to take the pieces (levels keep two sets at once).
LOCAL_ROOM = 2.5


def local_pieces(dst: Location, data_nbytes: int) -> Location | None:
    """Where the pieces of a shuffle into ``dst`` go when no ``tmp`` is given: this machine's disk, or ``None``.

    On object storage each piece's write and read is a request of tens of
    milliseconds: for such a ``dst`` the pieces go to this machine's temporary
    directory when every worker sees it and it has room for :data:`LOCAL_ROOM`
    times the data (or an interrupted run's pieces are there). ``None``: beside ``dst``.
    """
    if not dst.is_object_store:
        return None
    location = _leftovers.local_pieces_directory(dst)
    directory = location.path
    # The shared temporary directory is anyone's: a link placed there, or another user's directory, is refused.
    _own.refuse(directory, "a directory of pieces", directory=True)
    with contextlib.suppress(FileNotFoundError):
        owner = os.lstat(directory).st_uid
        if hasattr(os, "geteuid") and owner != os.geteuid():
            raise _own.unsafe(directory, "a directory of pieces", f"a directory of another user (uid {owner})")
    if dst.scratch(_leftovers.TMP_SUFFIX, location).exists():
        return location
    try:
        os.makedirs(directory, exist_ok=True)
        room = shutil.disk_usage(directory).free
    except OSError:
        return None
    if room < LOCAL_ROOM * data_nbytes or workers_not_seeing(directory):
        remove_if_empty(location)
        return None
    return location


def remove_if_empty(directory: Location) -> None:
    """Remove the local ``directory`` if nothing is in it (another run may be using it)."""
    with contextlib.suppress(OSError):
        os.rmdir(directory.path)


def check_workers_reach(paths: dict[str, Location], sources: Sequence[Location] = ()) -> None:
    """Refuse paths (``{parameter: location}``) and sources that the cluster's workers cannot reach, before anything runs there.

    A local path must be on a filesystem all workers share; object storage needs
    credentials the workers have (:func:`check_workers_access`).
    """
    check_workers_access([*paths.values(), *sources])
    checked: set[str] = set()
    for name, location in paths.items():
        if not location.is_local:
            continue
        # The directory of the path, or its nearest ancestor that exists (the shuffle makes the rest).
        directory = os.path.dirname(location.path)
        while directory and not os.path.isdir(directory) and os.path.dirname(directory) != directory:
            directory = os.path.dirname(directory)
        if directory in checked:
            continue
        checked.add(directory)
        missing = workers_not_seeing(directory)
        if missing:
            raise StorageNotFoundError(
                f"Expected every worker of the cluster to see the directory of {name}, {directory!r}. Got "
                f"{len(missing)} worker{'s' if len(missing) != 1 else ''} ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''}) that cannot instead; the cluster needs a shared filesystem "
                "(mounted at the same path on the client and every worker) or object storage (s3://, gs://, ...) "
                f"for {name}.",
                parameter=name,
            )


def check_workers_access(locations: Sequence[Location]) -> None:
    """Refuse storage that this process reaches and some of the cluster's workers do not (credentials, network).

    A worker may lack this process's credentials (``AWS_*`` set in a notebook):
    one location per bucket and options is looked at on each worker, as a task,
    before any task reads or writes there.
    """
    distinct: dict[tuple[str, str, str], Location] = {}
    for location in locations:
        if not location.is_local and location.protocol != "memory":
            key = (location.protocol, location.bucket, json.dumps(location.options, sort_keys=True, default=repr))
            distinct.setdefault(key, location)
    if not distinct:
        return
    found: dict[str, Any] = on_every_worker(unreached, list(distinct.values()))
    for location in distinct.values():
        failing = {
            worker: (reason, text)
            for worker, failed in found.items()
            for url, reason, text in failed
            if url == location.url
        }
        if not failing:
            continue
        reason, text = next(iter(failing.values()))
        if reason == "options":
            raise DaskShuffleValueError(f"On the cluster's workers: {text}", parameter="storage_options")
        raise access_error(location.url, text, reason, workers=sorted(failing), n_workers=len(found))


def check_destination(
    sources: Sequence[str | Location],
    dst: Location,
    tmp: Location | None,
    *,
    overwrite: bool,
    workers: bool = True,
    storage_options: dict[str, Any] | None = None,
    directory: bool = True,
) -> Location:
    """Check that ``dst`` and the scratch space may be written; return the scratch directory.

    The scratch directory is ``<dst>.daskshuffle-tmp``, or a subdirectory of ``tmp``
    named after ``dst`` (``tmp`` itself is never removed). With ``workers``, the
    cluster's workers must see both and reach the sources. ``directory``: ``dst``
    is a directory (a pile store), not a file. A local ``dst`` lies in a directory, not under a file.
    """
    if dst.is_local:  # overwrite=True does not make a pile store of a file: daskshuffle replaces only what it wrote
        if directory and os.path.lexists(dst.path) and not os.path.isdir(dst.path):
            raise DaskShuffleValueError(
                f"Expected dst to be a directory or not to exist. Got {dst.url!r}, which is a file, instead; a "
                "pile store is a directory: choose another destination.",
                parameter="dst",
            )
        above = os.path.dirname(dst.path)
        while not os.path.lexists(above) and os.path.dirname(above) != above:
            above = os.path.dirname(above)
        if not os.path.isdir(above):
            raise DaskShuffleValueError(
                f"Expected dst to lie in a directory. Got {dst.url!r}, under {above!r}, which is a file, instead; "
                "choose another destination.",
                parameter="dst",
            )
    scratch = dst.scratch(_leftovers.TMP_SUFFIX, tmp)
    for name, location in (("dst", dst), ("tmp", scratch)):
        for source in sources:
            if _paths.overlaps(location.url, str(source)):
                raise DaskShuffleValueError(
                    f"Expected {name} to lie outside the source. Got {name}={location.url!r} and source {str(source)!r} "
                    f"instead; choose another {name} (the source is never modified)."
                )
    if dst.check("dst") and not overwrite:
        raise exists_error(dst.url)
    _leftovers.check_own_paths(dst, tmp)
    scratch.check("tmp", bucket_known=scratch.fs is dst.fs and scratch.bucket == dst.bucket)
    if workers:
        check_workers_reach({"dst": dst, "tmp": scratch}, [Location.of(source, storage_options) for source in sources])
    return scratch


def exists_error(url: str) -> PileStoreExistsError:
    """The error for a destination (at ``url``) that exists when ``overwrite`` was not passed."""
    return PileStoreExistsError(
        (
            f"Expected dst not to exist. Got {url!r}, which exists, instead; ",
            Argument("overwrite", True, passed=True),
            " to replace it.",
        ),
        parameter="overwrite",
    )


def build_path(dst: Location, exists: bool) -> Location:
    """Where a shuffle into ``dst`` (which ``exists`` or not) builds its store: ``dst``, or ``<dst>.daskshuffle-new``.

    An existing destination stays whole and readable until the new store is complete.
    """
    return dst.with_suffix(_leftovers.NEW_SUFFIX) if exists else dst


def shuffle_locations(options: ShuffleOptions) -> tuple[Location, Location | None]:
    """The locations of ``dst`` and of ``tmp`` (if given), reached with the shuffle's ``storage_options``."""
    dst = Location.of(options.dst, options.storage_options)
    tmp = Location.of(options.tmp, options.storage_options) if options.tmp is not None else None
    return dst, tmp
