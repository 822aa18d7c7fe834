"""Writing pile stores with dask: the graph, running it, the public shuffles, verify, generations."""

from ._epochs import EpochShuffler
from ._frames import shuffle_dataframe, shuffle_parquet
from ._generations import Generation, append, clean_generations, compact, evict, generation_leftovers, generations
from ._lines import shuffle_lines
from ._run import ShuffleResult
from ._shuffle import shuffle_zarr
from ._verify import VerifyResult, sources_changed, verify
from ._xarray import shuffle_xarray

__all__ = [
    "EpochShuffler",
    "Generation",
    "ShuffleResult",
    "VerifyResult",
    "append",
    "clean_generations",
    "compact",
    "evict",
    "generation_leftovers",
    "generations",
    "shuffle_dataframe",
    "shuffle_lines",
    "shuffle_parquet",
    "shuffle_xarray",
    "shuffle_zarr",
    "sources_changed",
    "verify",
]
