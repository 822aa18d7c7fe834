"""A pile store's metadata, checked when the store is opened and before any row is read."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._errors import (
    Argument,
    CorruptPileStoreError,
    DaskShuffleError,
    DaskShuffleValueError,
    IncompletePileStoreError,
    SourceNotFoundError,
    UnfinishedShuffleError,
)
from ..plan import fingerprint
from ..storage import Location, bounded

__all__ = [
    "FORMAT_VERSION",
    "METADATA_KEY",
    "ROW_GROUP_ROWS_KEY",
    "RUN_KEY",
    "AppendedStoreError",
    "check_pile_metadata",
    "check_recorded_rows",
    "check_store_exists",
    "check_variable_names",
    "metadata_attribute",
    "metadata_disagrees",
    "new_run",
    "parse_metadata_attribute",
    "read_metadata",
    "select_variables",
]

#: The group attribute (Zarr) that holds a pile store's metadata.
METADATA_KEY = "daskshuffle"
#: Version of the pile store format written into every store's metadata, and the only one read: a store records
#: its layout, its run, each array's metadata and each chunk's crc32c by place (Parquet: each part's run and first
#: row), sealed. A store of any other version is refused (shuffle it again); until 1.0 there is one version.
FORMAT_VERSION = 3
#: The metadata key of the run's identity: a shuffle's, drawn afresh by each run that starts a store.
RUN_KEY = "run"
#: Keys bound to the run rather than to the order: outside the fingerprint (which names the order, and which
#: loader states record, so a store shuffled again the same way keeps it), inside the seal.
BOUND_KEYS = (RUN_KEY, "arrays", "seal")
#: A Parquet store's record of the rows a row group holds at most: its row groups end at every multiple of it
#: (store rows) and at every pile's end, so that the loader reads runs of that many rows as whole row groups.
ROW_GROUP_ROWS_KEY = "row_group_rows"
#: Keys a destination adds to the metadata after the shuffle fingerprinted it (the shuffle fingerprints it
#: marked incomplete): a Zarr store's layout (``_layout.LAYOUT_KEY``), an xarray store's dimension and a Parquet
#: store's row groups.
ADDED_AFTER_FINGERPRINT = ("layout", "dim", ROW_GROUP_ROWS_KEY, *BOUND_KEYS)
#: What to do about a pile store whose metadata disagrees with itself or with its data.
_REMEDY = (
    "shuffle the source again with overwrite=True, or restore the metadata from a copy and check the store against "
    "its source with `daskshuffle verify`"
)


def new_run() -> str:
    """A new run's identity: random, never drawn from the shuffle's seed (a rerun with the same seed is another run)."""
    return uuid.uuid4().hex


def seal_of(metadata: Mapping[str, Any]) -> str:
    """The hash of everything ``metadata`` records but the seal itself: layout, run, arrays and version included."""
    return fingerprint({key: value for key, value in metadata.items() if key != "seal"})


def metadata_attribute(metadata: Mapping[str, Any]) -> dict[str, Any] | str:
    """What the group attribute ``daskshuffle`` holds: the metadata, as JSON text in an xarray pile store.

    ``xr.open_zarr`` makes group attributes the dataset's, and netCDF takes no
    mapping as an attribute: text keeps ``to_netcdf`` working. An xarray
    store's metadata records its ``dim``.

    Examples
    --------
    >>> metadata_attribute({"dim": "sample"}), metadata_attribute({"kind": "zarr"})
    ('{"dim": "sample"}', {'kind': 'zarr'})
    """
    return json.dumps(dict(metadata)) if "dim" in metadata else dict(metadata)


def parse_metadata_attribute(value: object, where: str = "the pile store") -> dict[str, Any] | None:
    """The metadata the attribute ``daskshuffle`` holds, or ``None`` if it holds none.

    Read as :func:`metadata_attribute` writes it, alone: an xarray store's
    metadata (one with a ``dim``) as JSON text, any other's as a mapping. The
    other encoding is refused (:class:`~daskshuffle.IncompletePileStoreError`),
    as a store of another format is.
    """
    text = isinstance(value, str)
    if text:
        try:
            value = json.loads(value)  # type: ignore[arg-type]
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    if text != ("dim" in value):
        raise IncompletePileStoreError(
            f"Expected the metadata of {where!r} as this version of daskshuffle writes it: JSON text in an xarray "
            f"pile store, a mapping in any other. Got {'JSON text' if text else 'a mapping'} for "
            f"{'a store without' if text else 'an xarray store, with'} a dim instead; shuffle the source again "
            "(overwrite=True)."
        )
    return dict(value)


class AppendedStoreError(IncompletePileStoreError):
    """A Zarr pile store with several generations, opened as one generation: ``open_pile_reader`` reads them all."""


def check_store_exists(store: Location, where: str) -> None:
    """Refuse a pile store that does not exist (:class:`~daskshuffle.SourceNotFoundError`); ``where`` names it."""
    if not store.exists():
        raise SourceNotFoundError(f"Expected an existing pile store. Got {where!r}, which does not exist, instead.")


def check_pile_metadata(metadata: Mapping[str, Any], where: str) -> None:
    """Refuse a pile store of another format version than this release writes, or whose shuffle did not finish."""
    check_format_version(metadata, where)
    if not metadata.get("complete"):
        raise UnfinishedShuffleError(
            f"Expected a complete pile store. Got {where!r}, whose shuffle did not finish, instead; run the shuffle again."
        )


def check_format_version(metadata: Mapping[str, Any], where: str) -> None:
    """Refuse metadata of another format version than :data:`FORMAT_VERSION` (:class:`~daskshuffle.IncompletePileStoreError`).

    Examples
    --------
    >>> check_format_version({"format_version": 2}, "piles.zarr")
    Traceback (most recent call last):
    ...
    daskshuffle._errors.IncompletePileStoreError: Expected a pile store of format version 3. Got version 2 in 'piles.zarr' ...
    """
    version = metadata.get("format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise IncompletePileStoreError(
            (
                f"Expected a pile store of format version {FORMAT_VERSION}. Got version {version!r} in {where!r} "
                "instead; this version of daskshuffle reads no other: shuffle the source again (",
                Argument("overwrite", True),
                ").",
            )
        )


def _fingerprints(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    """What the fingerprint of ``metadata`` may be: of the whole (as generations' writers record it), or of what a
    shuffle fingerprinted before its destination added its keys and marked it complete."""
    whole = {key: value for key, value in metadata.items() if key != "fingerprint" and key not in BOUND_KEYS}
    shuffled = {key: value for key, value in whole.items() if key not in ADDED_AFTER_FINGERPRINT}
    return fingerprint(whole), fingerprint({**shuffled, "complete": False})


def metadata_disagrees(where: str, expected: str, got: str) -> CorruptPileStoreError:
    """The error for a pile store at ``where`` whose metadata disagrees with itself or its data."""
    return CorruptPileStoreError(
        f"Expected the metadata of the pile store {where!r} to agree with itself and with its data: {expected}. "
        f"Got {got} instead; the metadata was edited or damaged: {_REMEDY}."
    )


def check_recorded_rows(metadata: Mapping[str, Any], where: str, lengths: Mapping[str, int]) -> None:
    """Refuse metadata that disagrees with itself or with the data, before any row is read.

    ``lengths`` are the rows the data holds, by what holds them (each array of
    a Zarr store; the part files of a Parquet store). The fingerprint and seal
    catch an edit that keeps the numbers consistent. Reads nothing; the format
    version is checked before, where the store is opened.
    """
    try:
        offsets = np.asarray(metadata["pile_offsets"], dtype=np.int64)
        n_rows, n_piles = int(metadata["n_rows"]), int(metadata["n_piles"])
    except (KeyError, TypeError, ValueError) as error:
        raise metadata_disagrees(where, "integers n_rows, n_piles and pile_offsets", f"{error!r}") from error
    if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0:
        first = int(offsets.flat[0]) if offsets.size else "none"
        raise metadata_disagrees(where, "pile_offsets to start at 0", f"pile_offsets[0] = {first}")
    falls = np.flatnonzero(np.diff(offsets) < 0)
    if falls.size:
        pile = int(falls[0])
        raise metadata_disagrees(
            where,
            "pile_offsets that never fall",
            f"pile_offsets[{pile + 1}] = {int(offsets[pile + 1]):,} after pile_offsets[{pile}] = {int(offsets[pile]):,}",
        )
    last = int(offsets[-1])
    if n_rows != last:
        raise metadata_disagrees(
            where, "n_rows to equal the last pile offset", f"n_rows = {n_rows:,} and pile_offsets[-1] = {last:,}"
        )
    if n_piles != len(offsets) - 1:
        raise metadata_disagrees(
            where, "an offset for each pile and the end", f"n_piles = {n_piles:,} and {len(offsets):,} pile_offsets"
        )
    for name, length in lengths.items():
        if length != last:
            raise metadata_disagrees(
                where, f"{name} to hold the n_rows the metadata records", f"n_rows = {last:,} and {length:,} in {name}"
            )
    recorded = metadata.get("fingerprint")
    if recorded not in _fingerprints(metadata):
        raise metadata_disagrees(
            where,
            f"the fingerprint it records, {recorded!r}",
            f"metadata whose fingerprint is {_fingerprints(metadata)[0 if 'generations' in metadata else 1]!r}",
        )
    # The root of a store with generations lists them and is fingerprinted whole; each generation is sealed.
    if ("seal" in metadata or "generations" not in metadata) and metadata.get("seal") != seal_of(metadata):
        raise metadata_disagrees(
            where, f"the seal it records, {metadata.get('seal')!r}", f"metadata whose seal is {seal_of(metadata)!r}"
        )


def check_variable_names(metadata: Mapping[str, Any], where: str) -> list[str]:
    """The variables of a Zarr pile store's ``metadata``, each a plain name of an array in its group; else refused.

    A name is joined to the store's path to read (and, for generations, to
    remove) an array: a name with a separator, or ``..``, would reach outside
    the store, so it is refused before anything is read
    (:class:`~daskshuffle.CorruptPileStoreError`).
    """
    names = metadata.get("variables")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise metadata_disagrees(where, "variables to be a list of names", f"variables = {names!r}")
    for name in names:
        if not name or name in (".", "..") or any(char in name for char in "/\\\0"):
            raise metadata_disagrees(
                where, "each variable to name an array of the store's group (no '/', '\\' or '..')", repr(name)
            )
    return list(names)


def select_variables(metadata: Mapping[str, Any], variables: Sequence[str] | None) -> list[str]:
    """The recorded variables to read: all of them, or ``variables`` if they are all recorded."""
    names = list(metadata["variables"])
    if variables is None:
        return names
    unknown = [name for name in variables if name not in names]
    if unknown:
        raise DaskShuffleValueError(f"Expected variables among {names}. Got unknown {unknown} instead.")
    return list(variables)


#: Where each kind of pile store keeps the shuffle's metadata: a JSON file, and the key in it.
_METADATA_FILES = (("zarr.json", ("attributes", METADATA_KEY)), ("_daskshuffle.json", ()))


def read_metadata(
    store: str | os.PathLike[str] | Location, storage_options: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The shuffle's metadata of ``store``, complete or not, or ``None`` if it has none (plain JSON, read as such).

    Examples
    --------
    >>> read_metadata("piles.zarr")["complete"], read_metadata("raw.zarr")
    (True, None)
    """
    location = Location.of(store, storage_options)
    fs, root = location.fs, location.path
    for name, keys in _METADATA_FILES:
        try:
            with location.reaching():
                found: Any = json.loads(bounded(fs, "cat_file", f"{root}/{name}", what=name))
        except DaskShuffleError:  # the storage did not serve it: not a file that is missing or not JSON
            raise
        except (FileNotFoundError, ValueError):
            continue
        for key in keys:
            found = found.get(key) if isinstance(found, dict) else None
        return parse_metadata_attribute(found, location.url) if keys else (found if isinstance(found, dict) else None)
    return None
