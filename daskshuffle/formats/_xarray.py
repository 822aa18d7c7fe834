"""xarray datasets: rows along one dimension, shuffled into a Zarr pile store.

This is the Zarr format with an xarray source and an xarray-shaped destination:

- Source: every variable and coordinate that has the dimension ``dim`` is
  shuffled with one permutation. xarray decodes them (times, masks, scales);
  the pieces are the decoded values, raw, exactly as for Zarr arrays. A
  dask-backed dataset is read by its own tasks (:meth:`Format.block_inputs`):
  blocks follow its chunks along ``dim``, which may be irregular.
- Destination: a Zarr v3 group written by xarray itself, so that
  ``xr.open_zarr(dst)`` gives back the same dataset up to the order along
  ``dim``: attributes, CF encodings (time units, fill values, scale and
  offset) and the variables without ``dim`` (copied unchanged). Variables
  along ``dim`` are stored with ``dim`` first, so that a row is contiguous
  for the loader; a variable whose ``dim`` was elsewhere comes back
  transposed. Rows are encoded with the destination's own encodings and
  written whole chunks at a time, like Zarr arrays.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr
import zarr

from .._paths import normalize
from . import _layout
from ._zarr import _METADATA_KEY, ArrayRows, Variable, ZarrFormat

__all__ = ["XarrayFormat"]


class XarrayFormat(ZarrFormat):
    """The variables of an xarray dataset along one dimension, shuffled together.

    ``template`` (the destination's layout, lazily backed by the source) and
    ``inputs`` (the graph of the blocks) stay with the caller: they are not
    pickled into the tasks.
    """

    def __init__(
        self,
        *,
        dim: str,
        template: xr.Dataset,
        inputs: tuple[dict[Any, Any], list[Any]],
        variables: list[Variable],
        lengths: list[int],
        source_names: list[str],
        chunk_rows: int | None,
        storage_options: dict[str, Any] | None,
    ) -> None:
        starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).tolist()
        super().__init__(
            sources=[],
            variables=variables,
            blocks=[(0, start, stop) for start, stop in itertools.pairwise(starts)],
            source_names=source_names,
            group_attrs={},
            chunk_rows=chunk_rows,
            compressors="auto",
            storage_options=storage_options,
        )
        self.dim = dim
        self._template: xr.Dataset | None = template
        self._inputs: tuple[dict[Any, Any], list[Any]] | None = inputs

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_template": None, "_inputs": None}

    # -- the source ----------------------------------------------------------
    def block_inputs(self) -> tuple[dict[Any, Any], list[Any]] | None:
        return self._inputs

    def read_block(self, block: int) -> ArrayRows:
        raise NotImplementedError("the blocks of a dataset reach read_block_from through block_inputs")

    def read_block_from(self, block: int, data: Any) -> ArrayRows:
        return {variable.name: np.asarray(data[variable.name], dtype=variable.dtype) for variable in self.variables}

    # -- the destination -----------------------------------------------------
    def _open(self, dst: str) -> str | Any:
        if self.storage_options:
            return zarr.storage.FsspecStore.from_url(dst, storage_options=self.storage_options)
        return normalize(dst)

    def create_destination(self, dst: str, n_rows: int, metadata: Mapping[str, Any]) -> None:
        if self._template is None:
            raise RuntimeError("create_destination runs where the shuffle was planned, with its template")
        # xarray writes the layout, the encodings and the variables without ``dim``;
        # the rows along ``dim`` are left to the merge tasks (compute=False).
        layout = self._chosen_layout()
        for variable in self.variables:
            chosen = layout.variables[variable.name]
            stored = self._template.variables[variable.name]
            # The template's dask chunks along ``dim`` must fit the chosen zarr chunks (xarray checks it).
            rechunked = stored.chunk({self.dim: chosen.chunk_rows})
            rechunked.encoding = {
                **stored.encoding,
                **_layout.xarray_encoding(chosen, variable.dtype.itemsize, variable.row_shape),
            }
            if variable.name in self._template.coords:
                self._template = self._template.assign_coords({variable.name: rechunked})
            else:
                self._template[variable.name] = rechunked
        self._template.to_zarr(self._open(dst), mode="w", compute=False, zarr_format=3, consolidated=False)
        group = zarr.open_group(self._open(dst), mode="r+")
        group.attrs[_METADATA_KEY] = {**metadata, "dim": self.dim}

    def write_rows(self, dst: str, start: int, rows: ArrayRows, piece_info: Any) -> None:
        # Encode with the destination's own encodings (time units, fill values,
        # scales), exactly as xarray would, then write whole chunks.
        stored = xr.open_zarr(self._open(dst), consolidated=False, chunks=None)
        group = zarr.open_group(self._open(dst), mode="r+")
        for name, values in rows.items():
            variable = stored.variables[name]
            encoded = xr.conventions.encode_cf_variable(
                xr.Variable(variable.dims, values, attrs=variable.attrs, encoding=variable.encoding), name=name
            )
            array: Any = _layout.for_writing(group[name])
            array[start : start + len(values)] = np.asarray(encoded.values, dtype=array.dtype)

    def finalize_destination(self, dst: str, metadata: Mapping[str, Any]) -> None:
        super().finalize_destination(dst, {**metadata, "dim": self.dim})
