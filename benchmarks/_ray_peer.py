"""Ray Data as a contender of ``bench_peers.py``: a global shuffle written as Parquet, and two ways to read it.

- the shuffle, written: the source's rows read by Ray tasks (a block of rows
  each, as ``map_batches`` over the block starts), ``random_shuffle(seed=0)``
  and ``write_parquet``, what a Ray user runs to shuffle a dataset once;
- ``Ray Data global``: an epoch of ``read_parquet(...).random_shuffle(seed=epoch)
  .iter_batches(...)``, a full shuffle of the rows every epoch (Ray's
  recommended way to an independent order, and its slowest);
- ``Ray Data local``: an epoch of ``read_parquet(...).iter_batches(...,
  local_shuffle_buffer_size=LOCAL_BUFFER_ROWS, local_shuffle_seed=epoch)``:
  the shuffled copy read in order through a buffer of rows.

Ray runs a local cluster of this machine's cores, started before the shuffle
and before the loader is made (``ray.init`` is counted in neither); the worker
processes it starts for the first tasks are counted. Its processes (the raylet,
its workers, the object store in shared memory) are children of the measured
process, so their memory counts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

#: The contenders this module runs, and the kind of files they read (one Parquet copy for both).
CONTENDERS = ("Ray Data global", "Ray Data local")
KIND = "Ray"
RAY = "ray[data] 2.60.0"
#: Rows in the local shuffle buffer: ten batches of bench_peers' default 1024 (Ray's option has no default).
LOCAL_BUFFER_ROWS = 10_240


def ray_missing() -> str | None:
    """Why Ray Data cannot run with this python, or None."""
    try:
        import ray.data  # noqa: F401
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def start() -> None:
    """A local Ray cluster of this machine's cores, quiet, without its dashboard."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        from ray.data import DataContext

        DataContext.get_current().enable_progress_bars = False


def _read_blocks(batch: dict[str, np.ndarray], source: str, block_rows: int) -> dict[str, np.ndarray]:
    """The source's rows of the blocks that start at ``batch["start"]``."""
    import zarr

    group = zarr.open_group(source, mode="r")
    n_rows = group["id"].shape[0]
    x, ids = [], []
    for start in batch["start"].tolist():
        stop = min(start + block_rows, n_rows)
        x.append(group["x"][start:stop])
        ids.append(group["id"][start:stop])
    return {"x": np.concatenate(x), "id": np.concatenate(ids)}


def prepare(source: str, out: str, block_rows: int) -> None:
    """Shuffle the source's rows with Ray Data and write them as Parquet: ``random_shuffle().write_parquet()``."""
    import ray.data
    import zarr

    start()
    n_rows = zarr.open_group(source, mode="r")["id"].shape[0]
    starts = ray.data.from_items([{"start": start} for start in range(0, n_rows, block_rows)])
    rows = starts.map_batches(_read_blocks, batch_size=1, fn_kwargs={"source": source, "block_rows": block_rows})
    rows.random_shuffle(seed=0).write_parquet(out)


def batches(contender: str, store: str, batch_size: int, epoch: int = 0) -> Iterator[dict[str, Any]]:
    """An epoch of ``contender``'s batches (dicts of numpy arrays) from the Parquet copy at ``store``."""
    import ray.data

    start()
    rows = ray.data.read_parquet(store)
    if contender == "Ray Data global":
        return iter(rows.random_shuffle(seed=epoch).iter_batches(batch_size=batch_size, batch_format="numpy"))
    if contender == "Ray Data local":
        return iter(
            rows.iter_batches(
                batch_size=batch_size,
                batch_format="numpy",
                local_shuffle_buffer_size=LOCAL_BUFFER_ROWS,
                local_shuffle_seed=epoch,
            )
        )
    raise ValueError(contender)
