"""Zarr arrays and groups: the format, and the Zarr pile store it writes (shared with xarray).

The source is opened and checked by :mod:`._zarr_source`; rows in memory and
the piece files are :class:`._arrays.ArrayPieces`. The destination is a Zarr v3
group with the source's arrays, laid out for reading piles (:mod:`._layout`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
import zarr
from numpy.typing import NDArray

from ..storage._location import Location
from . import _layout
from ._arrays import RUN_NBYTES, ArrayPieces, ArrayRows, Variable
from ._base import Destination, FileSource
from ._pile_metadata import metadata_attribute
from ._zarr_source import (
    METADATA_KEY,
    SourceLike,
    inspect_sources,
    read_in_runs,
    run_rows,
)

__all__ = ["CHUNK_NBYTES", "SourceLike", "ZarrDestination", "ZarrFormat", "open_zarr_sources"]

#: The target size of one output chunk (of the widest variable; see ``_layout``).
CHUNK_NBYTES = _layout.CHUNK_NBYTES


class ZarrDestination(Destination[ArrayRows]):
    """A Zarr v3 pile store of ``variables``, its layout chosen for the plan's piles."""

    variables: list[Variable]
    group_attrs: dict[str, Any]
    compressors: Any
    chunk_rows: int
    chunk_rows_given: bool
    layout: _layout.Layout | None

    def _init_destination(self, chunk_rows: int | None, compressors: Any) -> None:
        self.compressors = compressors
        self.chunk_rows_given = chunk_rows is not None
        widest = max(1, *(variable.row_nbytes for variable in self.variables))
        self.chunk_rows = chunk_rows or max(1, CHUNK_NBYTES // widest)
        self.layout = None  # chosen by for_plan

    def _layout_samples(self) -> dict[str, NDArray[Any] | None]:
        """A sample of each variable's values to choose its codec from; ``None`` where there is none."""
        return dict.fromkeys((variable.name for variable in self.variables), None)

    def for_plan(self, pile_rows: float, *, materialize: bool, storage: Literal["local", "object"] = "local") -> Any:
        """The destination's layout for piles of ``pile_rows`` rows, on ``storage`` (see :mod:`._layout`).

        Chunk rows per variable (a materialized copy is read sequentially and
        gets ``CHUNK_NBYTES`` chunks), a codec chosen from a sample of the
        source, a crc32c per chunk.
        """
        layout = _layout.choose_layout(
            {variable.name: variable.row_nbytes for variable in self.variables},
            self._layout_samples(),
            None if materialize else pile_rows,
            chunk_rows=self.chunk_rows if self.chunk_rows_given else None,
            compressors=self.compressors,
            storage=storage,
        )
        # A shallow copy that keeps what pickling drops (an xarray template stays with the planner).
        adapted = object.__new__(type(self))
        adapted.__dict__.update(self.__dict__)
        adapted.layout = layout
        adapted.chunk_rows = layout.alignment()
        return adapted

    def write_alignment(self) -> int:
        return self._chosen_layout().alignment()

    def _chosen_layout(self) -> _layout.Layout:
        if self.layout is not None:
            return self.layout
        # Not planned (for_plan not called): every variable in chunks of ``chunk_rows``, no codec.
        return _layout.choose_layout(
            {variable.name: variable.row_nbytes for variable in self.variables},
            {},
            None,
            chunk_rows=self.chunk_rows,
            compressors=self.compressors,
        )

    def create_destination(self, dst: Location, n_rows: int, metadata: Mapping[str, Any]) -> None:
        layout = self._chosen_layout()
        group = _open_group(
            dst,
            mode="w",
            zarr_format=3,
            attributes={**self.group_attrs, METADATA_KEY: {**metadata, _layout.LAYOUT_KEY: layout.to_dict()}},
        )
        _layout.create_arrays(group, self.variables, layout, n_rows, self.compressors)

    def write_rows(self, dst: Location, start: int, rows: ArrayRows, piece_info: Any) -> None:
        group = _open_group(dst, mode="r+")
        runs = []
        most_chunks = None if dst.is_local else REMOTE_RUN_CHUNKS
        for name, values in rows.items():
            array = _layout.for_writing(group[name])
            runs += [
                (array, start + first, values[first:last]) for first, last in _runs(array, len(values), most_chunks)
            ]
        if not dst.is_local and len(runs) > 1:
            # An object store takes tens of milliseconds a chunk, zarr keeps ten in flight a write: write runs at
            # once too (each holds its encoded chunks until they are stored, so memory grows with the runs).
            with ThreadPoolExecutor(min(len(runs), REMOTE_RUNS), thread_name_prefix="daskshuffle-write") as pool:
                list(pool.map(lambda run: _write(*run), runs))
        else:
            for run in runs:
                _write(*run)

    def finalize_destination(self, dst: Location, metadata: Mapping[str, Any]) -> None:
        group = _open_group(dst, mode="r+")
        group.attrs[METADATA_KEY] = metadata_attribute(
            {**metadata, _layout.LAYOUT_KEY: self._chosen_layout().to_dict()}
        )
        with warnings.catch_warnings():
            # Consolidated metadata lets xarray open the store without probing every array.
            warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
            zarr.consolidate_metadata(group.store)

    def resume_destination(self, dst: Location) -> None:
        # zarr writes a local chunk to a temporary "<key>.<uuid>.partial" and renames it: a kill leaves that file.
        if dst.is_local:
            fs, root = dst.fs, dst.path
            for path in fs.glob(f"{root}/**/*.partial"):
                fs.rm_file(path)

    def discard_destination(self, dst: Location) -> None:
        """The store stays, marked incomplete: the loader refuses it and a rerun replaces it."""


def _open_group(dst: Location, **kwargs: Any) -> zarr.Group:
    """The Zarr group at ``dst``: where this format hands a location to zarr."""
    return zarr.open_group(dst.url, storage_options=dst.zarr_options, **kwargs)


def _runs(array: zarr.Array[Any], n_rows: int, most_chunks: int | None = None) -> list[tuple[int, int]]:
    """Runs of about ``RUN_NBYTES``, and of at most ``most_chunks`` chunks, to write ``n_rows`` rows from a chunk
    boundary in.

    zarr encodes the chunks of one write concurrently and holds every encoded
    chunk until it is stored: writing a whole group at once takes about twice
    its size. Runs bound the encoded chunks to one run.
    """
    rows = run_rows(array, RUN_NBYTES)
    if most_chunks is not None:
        rows = min(rows, most_chunks * int(array.chunks[0]))
    return [(first, min(first + rows, n_rows)) for first in range(0, n_rows, rows)]


def _write(array: zarr.Array[Any], start: int, values: NDArray[Any]) -> None:
    array[start : start + len(values)] = values


#: Runs written at once to a destination on object storage.
REMOTE_RUNS = 16
#: The most chunks in a run written to object storage: zarr sends ten requests at a time per write
#: (``async.concurrency``), so that runs of ten chunks, written ``REMOTE_RUNS`` at once, keep 160 in flight.
REMOTE_RUN_CHUNKS = 10


class ZarrFormat(FileSource[ArrayRows], ArrayPieces, ZarrDestination):
    """Zarr arrays that share their first dimension, shuffled together."""

    kind = "zarr"

    def __init__(
        self,
        *,
        sources: list[dict[str, zarr.Array[Any]]],
        variables: list[Variable],
        blocks: list[tuple[int, int, int]],
        source_names: list[str],
        group_attrs: dict[str, Any],
        chunk_rows: int | None,
        compressors: Any,
    ) -> None:
        self.sources = sources
        self.variables = variables
        self.blocks = blocks
        self.source_names = source_names
        self.group_attrs = group_attrs
        self._init_destination(chunk_rows, compressors)

    @property
    def block_lengths(self) -> tuple[int, ...]:
        return tuple(stop - start for _, start, stop in self.blocks)

    @property
    def row_nbytes(self) -> int:
        return sum(variable.row_nbytes for variable in self.variables)

    def read_block(self, block: int) -> ArrayRows:
        source, start, stop = self.blocks[block]
        return {name: read_in_runs(array, start, stop, RUN_NBYTES) for name, array in self.sources[source].items()}

    def describe_source(self) -> list[Any]:
        return list(self.source_names)

    def _layout_samples(self) -> dict[str, NDArray[Any] | None]:
        n_rows = sum(self.block_lengths)
        samples: dict[str, NDArray[Any] | None] = {}
        for variable in self.variables:
            # The first chunk (or SAMPLE_NBYTES of it): one read, which also finds a source that cannot be read.
            source = self.sources[0][variable.name]
            rows = min(_layout.sample_rows(variable.row_nbytes, n_rows), int(source.chunks[0]))
            samples[variable.name] = np.asarray(source[:rows])
        return samples


def open_zarr_sources(
    src: SourceLike | Sequence[SourceLike],
    *,
    variables: Sequence[str] | None = None,
    block_nbytes: int,
    chunk_rows: int | None = None,
    compressors: Any = "auto",
    storage_options: dict[str, Any] | None = None,
) -> ZarrFormat:
    """Open and check every source; raise before anything is written."""
    found = inspect_sources(src, variables=variables, block_nbytes=block_nbytes, storage_options=storage_options)
    return ZarrFormat(
        sources=found.arrays,
        variables=found.variables,
        blocks=found.blocks,
        source_names=found.names,
        group_attrs=found.group_attrs,
        chunk_rows=chunk_rows,
        compressors=compressors,
    )
