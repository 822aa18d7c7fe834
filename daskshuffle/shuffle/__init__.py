"""Writing pile stores with dask: the graph, running it, the public shuffles, verify, generations."""

from ._frames import shuffle_parquet
from ._generations import clean_generations, generation_leftovers
from ._lines import shuffle_lines
from ._shuffle import shuffle_zarr
from ._verify import sources_changed, verify
from ._xarray import shuffle_xarray

__all__ = [
    "clean_generations",
    "generation_leftovers",
    "shuffle_lines",
    "shuffle_parquet",
    "shuffle_xarray",
    "shuffle_zarr",
    "sources_changed",
    "verify",
]
