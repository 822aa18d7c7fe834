"""What a run leaves beside its destination when it is killed: found, measured and removed.

Something else at one of these names (a link someone placed) is no leftover:
it is refused before a run writes (:func:`check_own_paths`), never removed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass

from . import _lock, _own
from ._location import Location

__all__ = [
    "NEW_SUFFIX",
    "PARTIAL_SUFFIX",
    "SCRATCH_SUFFIXES",
    "SPOOL_SUFFIX",
    "TMP_SUFFIX",
    "Leftover",
    "check_own_paths",
    "clean",
    "find",
    "local_pieces_directory",
    "remove",
]

TMP_SUFFIX = ".daskshuffle-tmp"
SPOOL_SUFFIX = ".daskshuffle-spool"
#: The name of the directory, in this machine's temporary directory and with a digest of the destination, of the
#: pieces of a shuffle to object storage.
LOCAL_PIECES = "daskshuffle-pieces"
NEW_SUFFIX = ".daskshuffle-new"
#: Every directory a run keeps beside ``dst`` while it writes (the spool of compressed text inputs too).
SCRATCH_SUFFIXES = (TMP_SUFFIX, SPOOL_SUFFIX, NEW_SUFFIX, ".daskshuffle-old")
#: Where a text output is written until it is complete (a file, or a directory of parts on object storage).
PARTIAL_SUFFIX = ".daskshuffle-partial"


@dataclass(frozen=True)
class Leftover:
    """A path a killed run left (beside its destination, or in a store with generations), its size, and what it is."""

    location: Location
    nbytes: int
    what: str

    @classmethod
    def at(cls, location: Location, what: str) -> Leftover:
        """What is at ``location``, measured now (0 bytes if nothing is there)."""
        return cls(location, location.nbytes() if location.exists() else 0, what)

    @property
    def path(self) -> str:
        return self.location.url


def find(dst: Location, tmp: Location | None = None) -> list[Leftover]:
    """What runs left beside ``dst`` (their pieces under ``tmp``, if given), with a lock nobody holds.

    A lock a live run holds is not a leftover, nor is what that run writes: the
    result is empty while one runs.
    """
    if _lock.held(dst):
        return []
    return _scratch(dst, tmp) + _left_lock(dst)


def own_paths(dst: Location, tmp: Location | None = None) -> dict[Location, str]:
    """Every path a run into ``dst`` may write or remove beside it (or under ``tmp``), and what each is."""
    paths = {dst.with_suffix(_lock.LOCK_SUFFIX): "a lock file", dst.with_suffix(PARTIAL_SUFFIX): "an output"}
    if tmp is None and dst.is_object_store:
        paths[local_pieces_directory(dst)] = "a directory of pieces"
    return paths | dict.fromkeys(_scratch_paths(dst, tmp), "a scratch directory")


def _scratch_paths(dst: Location, tmp: Location | None) -> dict[Location, str]:
    """Every scratch directory of a run into ``dst``, and its suffix."""
    paths = {dst.with_suffix(suffix): suffix for suffix in SCRATCH_SUFFIXES}
    if tmp is not None:
        paths |= {dst.scratch(suffix, tmp): suffix for suffix in (TMP_SUFFIX, SPOOL_SUFFIX)}
    elif dst.is_object_store:  # the pieces may be on this machine (shuffle/_destination.py: local_pieces)
        paths[dst.scratch(TMP_SUFFIX, local_pieces_directory(dst))] = TMP_SUFFIX
    return paths


def check_own_paths(dst: Location, tmp: Location | None = None) -> None:
    """Before a run writes anything: refuse a link (or a FIFO, ...) someone placed where it writes beside ``dst``.

    Raises :class:`~daskshuffle.UnsafePathError` naming it; nothing is written
    through it or removed. A local ``dst`` whose name is too long for the
    names written beside it (``<dst>.daskshuffle-partial``, ...) raises
    :class:`~daskshuffle.DaskShuffleValueError`, naming it.
    """
    paths = own_paths(dst, tmp)
    if dst.is_local:
        beside = [location.path for location in paths if os.path.dirname(location.path) == os.path.dirname(dst.path)]
        if max(len(os.fsencode(os.path.basename(path))) for path in beside) > _name_max(dst.path):
            raise _lock.name_too_long(dst)
    for location, what in paths.items():
        if location.is_local:
            _own.refuse(location.path, what)


def _name_max(path: str) -> int:
    """The longest name, in bytes, the filesystem of the local ``path`` (or of its nearest existing directory) takes."""
    directory = os.path.dirname(path) or "."
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows), or the filesystem does not say
        return 255


def local_pieces_directory(dst: Location) -> Location:
    """The directory on this machine where the pieces of a shuffle into ``dst`` (on object storage) may go."""
    digest = hashlib.sha256(dst.url.encode()).hexdigest()[:16]
    return Location.of(os.path.join(tempfile.gettempdir(), f"{LOCAL_PIECES}-{digest}"))


def _scratch(dst: Location, tmp: Location | None) -> list[Leftover]:
    found = []
    for path, suffix in _scratch_paths(dst, tmp).items():
        if path.exists() and not path.placed():
            what = "pieces" if suffix == TMP_SUFFIX else "a store being built" if suffix == NEW_SUFFIX else "scratch"
            found.append(Leftover(path, path.nbytes(), what))
    return found


def _left_lock(dst: Location) -> list[Leftover]:
    lock = dst.with_suffix(_lock.LOCK_SUFFIX)
    if not lock.exists() or lock.placed():
        return []
    holder = _lock.read_holder(lock) or {}
    return [Leftover(lock, lock.nbytes(), f"the lock of {_lock.describe(holder)}, which is gone")]


def clean(dst: Location, tmp: Location | None = None) -> list[Leftover]:
    """Remove what runs left beside ``dst``, but its lock; the caller holds that lock (and removes it as it lets go).

    A link placed at one of those paths is refused (:func:`check_own_paths`), not removed.
    """
    check_own_paths(dst, tmp)
    found = _scratch(dst, tmp)
    for leftover in found:
        leftover.location.remove()
    return found


def remove(dst: Location, tmp: Location | None = None) -> list[Leftover]:
    """Remove what :func:`find` finds, holding the lock of ``dst``; refused while a run holds it."""
    left_lock = _left_lock(dst)  # before it is taken over
    with _lock.exclusive(dst):
        return clean(dst, tmp) + left_lock
