"""The Zarr pile store's writer, which the Zarr and xarray formats of :mod:`daskshuffle.sources` share.

The store is a Zarr v3 group with the source's arrays, laid out for reading piles (:mod:`._layout`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from numpy.typing import NDArray

from .._config import int_setting
from .._threads import each
from ..formats import ArrayRows, Destination, Variable, run_rows
from ..storage import Location, _own
from . import _binding, _layout
from ._groups import consolidate_group, open_group, zarr_store
from ._metadata import METADATA_KEY, metadata_attribute

if TYPE_CHECKING:
    import zarr

__all__ = ["ZarrDestination", "finish", "partials", "write_rows"]

#: What zarr names a key of a local store while it writes it (``zarr/storage/_local.py``, ``_atomic_write``): of the
#: keys daskshuffle writes, a ``zarr.json``, a chunk and a crc32c table.
_PARTIAL = re.compile(r"(zarr|\d+|daskshuffle-crc32c)\.[0-9a-f]{32}\.partial")


class ZarrDestination(Destination[ArrayRows]):
    """A Zarr v3 pile store of ``variables``, its layout chosen for the plan's piles."""

    variables: list[Variable]
    group_attrs: dict[str, Any]
    compressors: Any
    #: Every variable's chunk rows, if given; else chosen for the piles.
    chunk_rows: int | None
    #: Chosen by :meth:`for_plan`.
    layout: _layout.Layout | None = None

    def _layout_samples(self) -> dict[str, NDArray[Any] | None]:
        """A sample of each variable's values to choose its codec from; ``None`` where there is none."""
        return dict.fromkeys((variable.name for variable in self.variables), None)

    def _choose(
        self, samples: Mapping[str, NDArray[Any] | None], pile_rows: float | None, storage: Literal["local", "object"]
    ) -> _layout.Layout:
        row_nbytes = {variable.name: variable.row_nbytes for variable in self.variables}
        return _layout.choose_layout(
            row_nbytes, samples, pile_rows, chunk_rows=self.chunk_rows, compressors=self.compressors, storage=storage
        )

    def for_plan(self, pile_rows: float, *, materialize: bool, storage: Literal["local", "object"] = "local") -> Any:
        """The destination's layout for piles of ``pile_rows`` rows, on ``storage`` (see :mod:`._layout`).

        Chunk rows per variable (a materialized copy is read sequentially and
        gets ``CHUNK_NBYTES`` chunks), a codec chosen from a sample of the
        source, a crc32c per chunk.
        """
        # A shallow copy that keeps what pickling drops (an xarray template stays with the planner).
        adapted = object.__new__(type(self))
        adapted.__dict__.update(self.__dict__)
        adapted.layout = self._choose(self._layout_samples(), None if materialize else pile_rows, storage)
        return adapted

    def write_alignment(self) -> int:
        return self._chosen_layout().alignment()

    def _chosen_layout(self) -> _layout.Layout:
        # Not planned (for_plan not called): chunks of about CHUNK_NBYTES (or chunk_rows), no codec.
        return self.layout if self.layout is not None else self._choose({}, None, "local")

    def _layout_record(self) -> dict[str, Any]:
        """The layout as the metadata records it, with each variable's row shape: the reader checks its arrays against it."""
        record = self._chosen_layout().to_dict()
        for variable in self.variables:
            record["variables"][variable.name]["row_shape"] = [int(size) for size in variable.row_shape]
        return record

    def create_destination(self, dst: Location, n_rows: int, metadata: Mapping[str, Any]) -> None:
        layout = self._chosen_layout()
        group = open_group(
            dst,
            mode="w",
            attributes={**self.group_attrs, METADATA_KEY: {**metadata, _layout.LAYOUT_KEY: self._layout_record()}},
        )
        _layout.create_arrays(group, self.variables, layout, n_rows, self.compressors)

    def write_rows(self, dst: Location, start: int, rows: ArrayRows, piece_info: Any) -> None:
        write_rows(dst, start, rows)

    def finalize_destination(self, dst: Location, metadata: Mapping[str, Any]) -> None:
        finish(dst, {**metadata, _layout.LAYOUT_KEY: self._layout_record()})

    def resume_destination(self, dst: Location) -> None:
        # zarr names the file it writes a key through with a fresh uuid that nothing records, so a kill's leftovers
        # are found by their exact shape (:func:`partials`) in the store's own tree, never through a link.
        for path in partials(dst):
            dst.join(path).remove()

    def discard_destination(self, dst: Location) -> None:
        """The store stays, marked incomplete: the loader refuses it and a rerun replaces it."""


def finish(dst: Location, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Record ``metadata``, bound to what the run wrote (:func:`._binding.bind`), as the Zarr pile store's at ``dst``.

    The one way a Zarr pile store is finished: a shuffle's and a compaction's. Its metadata is then consolidated,
    so that xarray opens the store without probing every array. Returns the metadata recorded.
    """
    bound = _binding.bind(dst, metadata)
    group = open_group(dst, mode="r+")
    group.attrs[METADATA_KEY] = metadata_attribute(bound)
    consolidate_group(dst, group)
    return bound


def write_rows(dst: Location, start: int, rows: Mapping[str, NDArray[Any]]) -> None:
    """Write ``rows`` (arrays by variable) into the Zarr pile store at ``dst`` from row ``start`` on.

    Every chunk is written, even one all of fill value, and recorded with its crc32c by place: the run's binding
    of its chunks (:mod:`._binding`). The one writer of a Zarr pile store's rows: a shuffle's merge and a compaction.
    """
    import zarr

    from ._recording import RecordingStore

    recording = RecordingStore(zarr_store(dst))  # records every chunk written, with its crc32c
    group = zarr.open_group(store=recording, mode="r+")
    runs = []
    most_chunks = None if dst.is_local else int_setting("shuffle.remote-run-chunks")
    for name, values in rows.items():
        # Every chunk written, even one all of fill value: the setting is not stored with the array.
        array = cast("zarr.Array[Any]", group[name]).with_config({"write_empty_chunks": True})
        runs += [(array, start + first, values[first:last]) for first, last in _runs(array, len(values), most_chunks)]
    if not dst.is_local and len(runs) > 1:
        # An object store takes tens of milliseconds a chunk, zarr keeps ten in flight a write: write runs at
        # once too (each holds its encoded chunks until they are stored, so memory grows with the runs).
        each(lambda run: _write(*run), runs, int_setting("shuffle.remote-runs"))
    else:
        for run in runs:
            _write(*run)
    _binding.save_records(dst, group, recording, list(rows), start, len(next(iter(rows.values()), ())))


def _runs(array: zarr.Array[Any], n_rows: int, most_chunks: int | None = None) -> list[tuple[int, int]]:
    """Runs of ``n_rows`` rows, from a chunk boundary on, of about ``shuffle.run-nbytes`` and at most ``most_chunks`` chunks.

    zarr holds every encoded chunk of one write until it is stored: runs bound that memory to one run's.
    """
    rows = run_rows(array, int_setting("shuffle.run-nbytes"))
    if most_chunks is not None:
        rows = min(rows, most_chunks * int(array.chunks[0]))
    return [(first, min(first + rows, n_rows)) for first in range(0, n_rows, rows)]


def _write(array: zarr.Array[Any], start: int, values: NDArray[Any]) -> None:
    array[start : start + len(values)] = values


def partials(store: Location) -> list[str]:
    """The files zarr was writing into the local ``store`` when a step was killed (:data:`_PARTIAL`), relative to it.

    Only regular files of the store's own tree, a chunk's only in a ``c`` directory; no link is followed.
    """
    if not store.is_local or not os.path.isdir(store.path):
        return []
    found = []
    for directory, _, files in os.walk(store.path, followlinks=False):
        inner = os.path.relpath(directory, store.path)
        for name in files:
            match = _PARTIAL.fullmatch(name)
            path = name if inner == "." else f"{inner}/{name}"
            chunk = match is not None and match.group(1).isdigit()
            if match is None or (chunk and "c" not in inner.split(os.sep)) or _own.found_at(f"{directory}/{name}"):
                continue
            found.append(path.replace(os.sep, "/"))
    return sorted(found)
