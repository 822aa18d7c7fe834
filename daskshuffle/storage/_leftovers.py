"""What a run leaves beside its destination when it is killed: found, measured and removed.

A shuffle keeps its pieces in ``<dst>.daskshuffle-tmp``, builds a replacing
store in ``<dst>.daskshuffle-new`` (``<dst>.daskshuffle-old`` for a moment
where a swap takes two renames) and holds ``<dst>.daskshuffle-lock``. A run
killed after its store was marked complete, before it removed these, leaves
them for good: running the same shuffle again removes them, as does
``daskshuffle info --clean``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import _lock, _paths

__all__ = [
    "NEW_SUFFIX",
    "SCRATCH_SUFFIXES",
    "TMP_SUFFIX",
    "Leftover",
    "clean",
    "find",
    "human_bytes",
    "nbytes",
    "remove",
]

TMP_SUFFIX = ".daskshuffle-tmp"
NEW_SUFFIX = ".daskshuffle-new"
#: Every directory a run keeps beside ``dst`` while it writes (the spool of compressed text inputs too).
SCRATCH_SUFFIXES = (TMP_SUFFIX, ".daskshuffle-spool", NEW_SUFFIX, ".daskshuffle-old")


@dataclass(frozen=True)
class Leftover:
    """A path a run left beside its destination, its size in bytes, and what it is."""

    path: str
    nbytes: int
    what: str


def nbytes(path: str, storage_options: dict[str, Any] | None) -> int:
    """Bytes of the file ``path``, or of every file below the directory ``path``."""
    fs, inner = _paths.filesystem(path, storage_options)
    return int(fs.du(inner, total=True)) if fs.isdir(inner) else int(fs.size(inner) or 0)


def find(dst: str, storage_options: dict[str, Any] | None = None, tmp: str | None = None) -> list[Leftover]:
    """What runs left beside ``dst`` (their pieces under ``tmp``, if given), with a lock nobody holds.

    A lock a live run holds is not a leftover, nor is what that run writes: the
    result is empty while one runs.
    """
    if _lock.held(dst, storage_options):
        return []
    return _scratch(dst, storage_options, tmp) + _left_lock(dst, storage_options)


def _scratch(dst: str, storage_options: dict[str, Any] | None, tmp: str | None) -> list[Leftover]:
    found = []
    paths = {_paths.sibling(dst, suffix): suffix for suffix in SCRATCH_SUFFIXES}
    if tmp is not None:
        paths[_paths.scratch(dst, TMP_SUFFIX, tmp)] = TMP_SUFFIX
    for path, suffix in paths.items():
        if _paths.exists(path, storage_options):
            what = "pieces" if suffix == TMP_SUFFIX else "a store being built" if suffix == NEW_SUFFIX else "scratch"
            found.append(Leftover(path, nbytes(path, storage_options), what))
    return found


def _left_lock(dst: str, storage_options: dict[str, Any] | None) -> list[Leftover]:
    lock = _paths.sibling(dst, _lock.LOCK_SUFFIX)
    if not _paths.exists(lock, storage_options):
        return []
    holder = _lock.read_holder(dst, storage_options) or {}
    return [Leftover(lock, nbytes(lock, storage_options), f"the lock of {_lock.describe(holder)}, which is gone")]


def clean(dst: str, storage_options: dict[str, Any] | None = None, tmp: str | None = None) -> list[Leftover]:
    """Remove what runs left beside ``dst``, but its lock; the caller holds that lock (and removes it as it lets go)."""
    found = _scratch(dst, storage_options, tmp)
    for leftover in found:
        _paths.remove(leftover.path, storage_options)
    return found


def remove(dst: str, storage_options: dict[str, Any] | None = None, tmp: str | None = None) -> list[Leftover]:
    """Remove what :func:`find` finds, holding the lock of ``dst``; refused while a run holds it."""
    left_lock = _left_lock(dst, storage_options)  # before it is taken over
    with _lock.exclusive(dst, storage_options):
        return clean(dst, storage_options, tmp) + left_lock


def human_bytes(nbytes: int) -> str:
    """``1.3 GB``: decimal units, as ``du -h --si`` and file managers print them."""
    size = float(nbytes)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")
