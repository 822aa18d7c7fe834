"""What ``src`` names: paths, URLs and globs, parsed and looked up the one way every source that takes them does."""

from __future__ import annotations

import os
from typing import Any

from .._errors import DaskShuffleTypeError, DaskShuffleValueError, SourceNotFoundError
from ..storage import Location, glob_matches

__all__ = ["found", "parse_sources"]


def parse_sources(value: object, what: str = "text file") -> list[str]:
    """One path, URL or glob, or a non-empty list of them, as strings: ``src`` of a shuffle of ``what`` s."""
    items: list[object] = list(value) if isinstance(value, list | tuple) else [value]
    if not items:
        raise DaskShuffleValueError(f"Expected src to name at least one {what}. Got an empty list instead.")
    sources = []
    for item in items:
        if not isinstance(item, str | os.PathLike) or not os.fspath(item):
            raise DaskShuffleTypeError(
                f"Expected src to be a path, URL or glob, or a list of them. Got {item!r} instead."
            )
        sources.append(os.fspath(item))
    return sources


def found(
    where: Location, item: object, what: str, *, argument: str = "src", files_only: bool = True
) -> tuple[dict[str, dict[str, Any]] | None, dict[str, Any] | None]:
    """What ``where`` names: the glob's matches (fsspec's info by path, files only if ``files_only``) and ``None``,
    or ``None`` and the info of the path itself; :class:`~daskshuffle.SourceNotFoundError` if it names nothing
    (``item`` as the user gave it). A path costs one look."""
    matched = glob_matches(where)
    info = where.info() if matched is None else None
    if info is not None:
        return None, info
    if matched is not None and files_only:
        matched = {path: info for path, info in matched.items() if info["type"] == "file"}
    if not matched:
        reason = "does not exist" if matched is None else "matches no file"
        raise SourceNotFoundError(f"Expected {argument} to name {what}. Got {str(item)!r}, which {reason}, instead.")
    return matched, None
