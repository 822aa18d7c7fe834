"""Zarr arrays and groups as a source: opened and checked by :mod:`._zarr_source`, pieces of
:class:`._arrays.ArrayPieces`, written to the Zarr pile store of :mod:`daskshuffle.pilestore`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from ..formats import ArrayRows, FileSource, read_in_runs
from ..pilestore import sample_rows
from ._arrays import ArrayFormat
from ._undecodable import decoded_chunks
from ._zarr_source import SourceLike, inspect_sources

if TYPE_CHECKING:
    import zarr

__all__ = ["SourceLike", "ZarrFormat", "open_zarr_sources"]


class ZarrFormat(ArrayFormat, FileSource[ArrayRows]):
    """Zarr arrays that share their first dimension, shuffled together."""

    def __init__(
        self, *, sources: list[dict[str, zarr.Array[Any]]], blocks: list[tuple[int, int, int]], **common: Any
    ) -> None:
        super().__init__(**common)
        self.sources = sources
        self.blocks = blocks

    @property
    def block_lengths(self) -> tuple[int, ...]:
        return tuple(stop - start for _, start, stop in self.blocks)

    def read_block(self, block: int) -> ArrayRows:
        source, start, stop = self.blocks[block]
        run_nbytes = int_setting("shuffle.run-nbytes")
        rows = {}
        for name, array in self.sources[source].items():
            with decoded_chunks(array, start, stop):
                rows[name] = read_in_runs(array, start, stop, run_nbytes)
        return rows

    def _layout_samples(self) -> dict[str, NDArray[Any] | None]:
        n_rows = sum(self.block_lengths)
        samples: dict[str, NDArray[Any] | None] = {}
        for variable in self.variables:
            # The first chunk (or SAMPLE_NBYTES of it): one read, which also finds a source that cannot be read.
            source = self.sources[0][variable.name]
            rows = min(sample_rows(variable.row_nbytes, n_rows), int(source.chunks[0]))
            with decoded_chunks(source, 0, rows):
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
    return ZarrFormat(**vars(found), chunk_rows=chunk_rows, compressors=compressors)
