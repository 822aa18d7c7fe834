"""Zarr arrays and groups as a source: opened and checked by :mod:`._zarr_source`, pieces of
:class:`._arrays.ArrayPieces`, written to the Zarr pile store of :mod:`daskshuffle.pilestore`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from ..formats import ArrayRows, FileSource, Variable, read_in_runs
from ..pilestore import ZarrDestination, sample_rows
from ._arrays import ArrayPieces
from ._undecodable import decoded_chunks
from ._zarr_source import SourceLike, describe, inspect_sources

if TYPE_CHECKING:
    import zarr

__all__ = ["SourceLike", "ZarrFormat", "open_zarr_sources"]


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
        identity: list[dict[str, Any]] | None = None,
    ) -> None:
        self.sources = sources
        self.identity = identity or []
        self.variables = variables
        self.blocks = blocks
        self.source_names = source_names
        self.group_attrs = group_attrs
        self._init_destination(chunk_rows, compressors)
        self._init_pieces()

    @property
    def block_lengths(self) -> tuple[int, ...]:
        return tuple(stop - start for _, start, stop in self.blocks)

    @property
    def row_nbytes(self) -> int:
        return sum(variable.row_nbytes for variable in self.variables)

    def read_block(self, block: int) -> ArrayRows:
        source, start, stop = self.blocks[block]
        run_nbytes = int_setting("shuffle.run-nbytes")
        rows = {}
        for name, array in self.sources[source].items():
            with decoded_chunks(array, describe(array), start, stop):
                rows[name] = read_in_runs(array, start, stop, run_nbytes)
        return rows

    def describe_source(self) -> list[Any]:
        return list(self.source_names)

    def identify_source(self) -> list[dict[str, Any]]:
        return list(self.identity)

    def _layout_samples(self) -> dict[str, NDArray[Any] | None]:
        n_rows = sum(self.block_lengths)
        samples: dict[str, NDArray[Any] | None] = {}
        for variable in self.variables:
            # The first chunk (or SAMPLE_NBYTES of it): one read, which also finds a source that cannot be read.
            source = self.sources[0][variable.name]
            rows = min(sample_rows(variable.row_nbytes, n_rows), int(source.chunks[0]))
            with decoded_chunks(source, describe(source), 0, rows):
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
        identity=found.identity,
        chunk_rows=chunk_rows,
        compressors=compressors,
    )
