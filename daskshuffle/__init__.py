"""daskshuffle: shuffle training data larger than memory, out of core, on dask.

>>> import daskshuffle as ds
>>> ds.shuffle_zarr("raw.zarr", "shuffled.zarr", n_piles=8, seed=0)
<ShuffleResult pile store '...shuffled.zarr': 1,000 rows in 8 piles ...>

Names are imported on first use, so ``import daskshuffle`` is cheap and the
pure layers (the plan) can be used without loading dask or zarr. To export a
new public name, add it to ``_LAZY`` (name -> private module) and ``__all__``; a new
error, to ``_errors.__all__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import _errors
from ._errors import *  # noqa: F403  (the errors, listed once, in _errors.__all__)

if TYPE_CHECKING:
    from . import orders
    from .loader import LoaderSettings, PileLoader
    from .plan import ScaleModel, Stream, explain
    from .shuffle import (
        EpochShuffler,
        Generation,
        ShuffleResult,
        VerifyResult,
        append,
        compact,
        evict,
        generations,
        shuffle_dataframe,
        shuffle_lines,
        shuffle_parquet,
        shuffle_xarray,
        shuffle_zarr,
        verify,
    )
    from .storage import Cache

__version__ = "0.1.0"

_LAZY = {
    "Cache": ".storage._cache",
    "EpochShuffler": ".shuffle._epochs",
    "Generation": ".shuffle._generations",
    "append": ".shuffle._generations",
    "compact": ".shuffle._generations",
    "evict": ".shuffle._generations",
    "generations": ".shuffle._generations",
    "LoaderSettings": ".loader._loader",
    "PileLoader": ".loader._loader",
    "ShuffleResult": ".shuffle._run",
    "Stream": ".plan._streams",
    "ScaleModel": ".plan._scale_model",
    "explain": ".plan._scale",
    "shuffle_zarr": ".shuffle._shuffle",
    "shuffle_lines": ".shuffle._lines",
    "shuffle_dataframe": ".shuffle._frames",
    "shuffle_parquet": ".shuffle._frames",
    "shuffle_xarray": ".shuffle._xarray",
    "VerifyResult": ".shuffle._verify",
    "verify": ".shuffle._verify",
}

__all__ = [
    "Cache",
    "EpochShuffler",
    "Generation",
    "LoaderSettings",
    "PileLoader",
    "ScaleModel",
    "ShuffleResult",
    "Stream",
    "VerifyResult",
    "append",
    "compact",
    "evict",
    "explain",
    "generations",
    "orders",
    "shuffle_dataframe",
    "shuffle_lines",
    "shuffle_parquet",
    "shuffle_xarray",
    "shuffle_zarr",
    "verify",
]
__all__ += _errors.__all__


def __getattr__(name: str) -> Any:
    if name == "orders":  # a public module: ``ds.orders.Py1b(shuffle_block_size=4096)``
        module = importlib.import_module(".orders", __name__)
        globals()[name] = module
        return module
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'daskshuffle' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
