"""daskshuffle: shuffle training data larger than memory, out of core, on dask.

>>> import daskshuffle as ds
>>> ds.shuffle_zarr("raw.zarr", "shuffled.zarr", n_piles=8, seed=0)
<ShuffleResult pile store '...shuffled.zarr': 1,000 rows in 8 piles ...>

Every public name is listed once, typed, in ``__init__.pyi``, and imported on
first use (Scientific Python's ``lazy_loader``): ``import daskshuffle`` loads no
dask, zarr or pyarrow, and each entry point loads only what it uses.
"""

import lazy_loader

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
