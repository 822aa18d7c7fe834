"""fsspec's internals: the filesystems its instance caches hold.

Every fsspec filesystem class keeps the instances it made in ``_cache`` (a
dict per class, set by the ``_Cached`` metaclass of ``fsspec.spec``), and
empties it in a child process right after a fork. No public API lists the
instances. Checked against fsspec 2026.9 (:data:`CHECKED`). Nothing is
imported: the function is handed the base class.
"""

from __future__ import annotations

__all__ = ["CHECKED", "cached_filesystems"]

#: The versions (major.minor) each function here was checked against.
CHECKED: dict[str, tuple[str, ...]] = {"fsspec": ("2026.9",)}


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
    classes, seen = [base], set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        classes.extend(cls.__subclasses__())
        cache = cls.__dict__.get("_cache")
        if cache is not None:
            found.extend(list(cache.values()))
    return found
