"""Writing pile stores with dask: the graph, running it, the public shuffles, verify."""

from ._compute import map_tasks
from ._options import shared_docs
from ._run import ShuffleResult
from ._shuffle import shuffle_zarr
from ._store_plan import shown_changes
from ._verify import sources_changed

__all__ = ["ShuffleResult", "map_tasks", "shared_docs", "shown_changes", "shuffle_zarr", "sources_changed"]
