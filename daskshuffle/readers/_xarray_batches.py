"""Batches of a Zarr pile store as ``xarray.Dataset`` objects, as ``xr.open_zarr`` decodes them."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..formats import ArrayRows, ArrayRowsMethods
from ..pilestore import METADATA_KEY
from ..storage import Location

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["DatasetRows"]


class DatasetRows(ArrayRowsMethods):
    """A Zarr pile store's rows as a dict of arrays, whose batches are ``xarray.Dataset`` objects.

    Batches are gathered with :meth:`take` and :meth:`concat`, then made datasets.

    Examples
    --------
    >>> import numpy as np
    >>> from daskshuffle.storage._location import Location
    >>> rows = DatasetRows(Location.of("piles.zarr"), ["x", "id"])
    >>> batch = rows.to_batch({"x": np.zeros((4, 8), "f4"), "id": np.arange(4)})
    >>> dict(batch.sizes)
    {'row': 4, 'feature': 8}
    """

    def __init__(self, store: Location, names: Sequence[str]) -> None:
        import xarray as xr

        raw = xr.open_zarr(store.url, chunks=None, decode_cf=False, consolidated=None, storage_options=store.options)
        self.names = list(names)
        self.dims = {name: raw[name].dims for name in names}
        self.attrs = {name: dict(raw[name].attrs) for name in names}
        self.coords = {name for name in names if name in raw.coords}
        rows = {self.dims[name][0] for name in names}
        # Variables without the row dimension are the same in every batch: read them once.
        fixed = [name for name, variable in raw.variables.items() if not rows & set(variable.dims)]
        self.fixed = raw[fixed].load() if fixed else xr.Dataset()
        self.global_attrs = {key: value for key, value in raw.attrs.items() if key != METADATA_KEY}

    def as_arrays(self, rows: ArrayRows) -> None:
        return None

    def to_batch(self, rows: ArrayRows) -> xr.Dataset:
        import xarray as xr

        variables = {
            name: xr.Variable(self.dims[name], np.asarray(rows[name]), self.attrs[name]) for name in self.names
        }
        coords: dict[Hashable, Any] = {name: variables[name] for name in self.coords}
        coords.update(self.fixed.coords.variables)
        data: dict[Hashable, Any] = {name: variable for name, variable in variables.items() if name not in self.coords}
        data.update({name: self.fixed[name].variable for name in self.fixed.data_vars})
        return xr.decode_cf(xr.Dataset(data, coords=coords, attrs=self.global_attrs))
