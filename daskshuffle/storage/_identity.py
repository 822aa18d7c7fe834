"""What a source is now, cheaply: the sizes and versions of its files, as a pile store records them.

:func:`changed_entries` says what changed since, so that a rerun against
changed sources is refused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fsspec import AbstractFileSystem

from ._access import reaching
from ._deadline import bounded

__all__ = ["changed_entries", "identify_files", "identify_token", "identify_tree"]

#: The keys of fsspec's ``info`` that change when a file's bytes are replaced, in groups: the first group of
#: which a file has any key is recorded. Object storage's ETag (S3, Azure, HTTP), generation and hash (GCS);
#: a disk's modification time and inode (a file replaced by a rename is a new inode); the creation time of a
#: file in memory.
VERSION_KEYS = (
    ("ETag", "etag", "generation", "md5Hash"),
    ("mtime", "LastModified", "last_modified", "ino"),
    ("created",),
)


def version_of(info: Mapping[str, Any]) -> str:
    """The version of a file from its fsspec ``info``: the first group of :data:`VERSION_KEYS` it has, as text."""
    for group in VERSION_KEYS:
        found = [f"{key}={info[key]}" for key in group if info.get(key) is not None]
        if found:
            return ";".join(found)
    return ""


def _digest(rows: Iterable[tuple[str, int, str]]) -> str:
    digest = hashlib.sha256()
    for name, size, version in rows:
        digest.update(f"{name}\0{size}\0{version}\n".encode())
    return digest.hexdigest()[:32]


def identify_tree(fs: AbstractFileSystem, path: str, name: str, *, fresh: bool = False) -> dict[str, Any]:
    """The entry of every file below ``path`` (or of the file at ``path``), named ``name``: one bounded listing.

    ``fresh``: asked of the storage, not of what fsspec's listings cache holds.

    Examples
    --------
    >>> from fsspec.implementations.local import LocalFileSystem
    >>> sorted(identify_tree(LocalFileSystem(), "raw.zarr/x", "raw.zarr/x"))
    ['bytes', 'digest', 'files', 'name']
    """
    with reaching(fs.unstrip_protocol(path)):
        if fresh:
            fs.invalidate_cache(path)
        found: dict[str, Any] = bounded(fs, "find", path, detail=True, what=path)
        # fsspec's find gives a file (not a directory) without its details: ask for them.
        infos = {key: (value or bounded(fs, "info", key, what=key)) for key, value in found.items()}
    root = fs._strip_protocol(path).rstrip("/")
    rows = sorted(
        (key[len(root) :].lstrip("/"), int(info.get("size") or 0), version_of(info))
        for key, info in infos.items()
        if info.get("type", "file") != "directory"
    )
    return {"name": name, "files": len(rows), "bytes": sum(size for _, size, _ in rows), "digest": _digest(rows)}


def identify_files(
    fs: AbstractFileSystem, paths: Sequence[str], names: Sequence[str], *, fresh: bool = False
) -> list[dict[str, Any]]:
    """One entry for each file of ``paths`` (named by ``names``): its size and version, one bounded ``info`` each.

    ``fresh``: asked of the storage, not of what fsspec's listings cache holds (their directories listed again,
    once each, rather than a request a file on object storage).
    """
    if fresh:
        fs.invalidate_cache()
        for parent in dict.fromkeys(fs._parent(path) for path in paths):
            with reaching(fs.unstrip_protocol(parent)):
                bounded(fs, "ls", parent, detail=True, what=parent)
    entries = []
    for path, name in zip(paths, names, strict=True):
        with reaching(fs.unstrip_protocol(path)):
            info = bounded(fs, "info", path, what=path)
        size = int(info.get("size") or 0)
        entries.append({"name": name, "files": 1, "bytes": size, "digest": _digest([("", size, version_of(info))])})
    return entries


def identify_token(name: str, token: str) -> dict[str, Any]:
    """The entry of an object in memory (a DataFrame, a dask collection) that dask's ``tokenize`` gave ``token``."""
    return {"name": name, "token": token}


def changed_entries(recorded: Sequence[Mapping[str, Any]], now: Sequence[Mapping[str, Any]]) -> list[str]:
    """What differs between two lists of entries, each change in a few words (empty: the same sources)."""
    before = {str(entry.get("name")): entry for entry in recorded if isinstance(entry, Mapping)}
    after = {str(entry.get("name")): entry for entry in now}
    changes = []
    for name, entry in after.items():
        old = before.get(name)
        if old is None:
            changes.append(f"{name} (not read before)")
        elif dict(old) != dict(entry):
            changes.append(f"{name} ({_change(old, entry)})")
    changes += [f"{name} (not read now)" for name in before if name not in after]
    return changes


def _change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    if "token" in new or "token" in old:
        return "its dask token changed: other values or another graph"
    size = [(int(entry.get("files", 0)), int(entry.get("bytes", 0))) for entry in (old, new)]
    if size[0] == size[1]:
        return f"{size[1][0]:,} file(s) of {size[1][1]:,} bytes, as before, written again or changed since"
    return f"{size[0][0]:,} file(s) of {size[0][1]:,} bytes then, {size[1][0]:,} of {size[1][1]:,} bytes now"
