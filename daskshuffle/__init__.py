"""daskshuffle: shuffle training data larger than memory, out of core, on dask.

>>> import daskshuffle as ds
>>> ds.shuffle_zarr("raw.zarr", "shuffled.zarr", n_piles=8, seed=0)
<ShuffleResult pile store 'shuffled.zarr': 1,000 rows in 8 piles ...>

Names are imported on first use, so ``import daskshuffle`` is cheap and the
pure layers (the plan) can be used without loading dask or zarr. To export a
new public name, add it to ``_LAZY`` (name -> private module) and ``__all__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    CorruptPileStoreError,
    DaskShuffleError,
    DaskShuffleTypeError,
    DaskShuffleValueError,
    IncompletePileStoreError,
    PileStoreExistsError,
    SourceNotFoundError,
    StorageAccessError,
    StorageFullError,
    StorageNotFoundError,
    UnfinishedShuffleError,
    VerificationError,
)

if TYPE_CHECKING:
    from ._epochs import EpochShuffler
    from ._frames import shuffle_dataframe, shuffle_parquet
    from ._generations import Generation, append, compact, evict, generations
    from ._lines import shuffle_lines
    from ._loader import LoaderSettings, PileLoader
    from ._run import ShuffleResult
    from ._scale import ScaleModel, explain
    from ._shuffle import shuffle_zarr
    from ._streams import Stream
    from ._verify import VerifyResult, verify
    from ._xarray import shuffle_xarray

__version__ = "0.1.0"

_LAZY = {
    "EpochShuffler": "._epochs",
    "Generation": "._generations",
    "append": "._generations",
    "compact": "._generations",
    "evict": "._generations",
    "generations": "._generations",
    "LoaderSettings": "._loader",
    "PileLoader": "._loader",
    "ShuffleResult": "._run",
    "Stream": "._streams",
    "ScaleModel": "._scale",
    "explain": "._scale",
    "shuffle_zarr": "._shuffle",
    "shuffle_lines": "._lines",
    "shuffle_dataframe": "._frames",
    "shuffle_parquet": "._frames",
    "shuffle_xarray": "._xarray",
    "VerifyResult": "._verify",
    "verify": "._verify",
}

__all__ = [
    "CorruptPileStoreError",
    "DaskShuffleError",
    "DaskShuffleTypeError",
    "DaskShuffleValueError",
    "EpochShuffler",
    "Generation",
    "IncompletePileStoreError",
    "LoaderSettings",
    "PileLoader",
    "PileStoreExistsError",
    "ScaleModel",
    "ShuffleResult",
    "SourceNotFoundError",
    "StorageAccessError",
    "StorageFullError",
    "StorageNotFoundError",
    "Stream",
    "UnfinishedShuffleError",
    "VerificationError",
    "VerifyResult",
    "append",
    "compact",
    "evict",
    "explain",
    "generations",
    "shuffle_dataframe",
    "shuffle_lines",
    "shuffle_parquet",
    "shuffle_xarray",
    "shuffle_zarr",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'daskshuffle' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
