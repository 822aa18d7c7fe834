"""daskshuffle: shuffle training data larger than memory, out of core, on dask.

>>> import daskshuffle as ds
>>> ds.shuffle_zarr("raw.zarr", "piles.zarr", n_piles=512, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

from ._errors import (
    DaskShuffleError,
    DaskShuffleTypeError,
    DaskShuffleValueError,
    IncompletePileStoreError,
    PileStoreExistsError,
    SourceNotFoundError,
)
from ._shuffle import ShuffleResult, shuffle_zarr

__version__ = "0.1.0"

__all__ = [
    "DaskShuffleError",
    "DaskShuffleTypeError",
    "DaskShuffleValueError",
    "IncompletePileStoreError",
    "PileStoreExistsError",
    "ShuffleResult",
    "SourceNotFoundError",
    "shuffle_zarr",
]
