"""A small end-to-end run: ``python -m daskshuffle.demo`` (what ``make demo`` runs).

Writes four Zarr stores (~200 MB), shuffles them on a two-worker ``LocalCluster``, checks the result
is a permutation with aligned variables, reads one epoch with ``PileLoader``, and reports times.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from numpy.typing import NDArray

__all__ = ["main", "make_example"]


def make_example(root: str | Path, n_stores: int = 4, rows_per_store: int = 200_000, width: int = 64) -> list[str]:
    """Write ``n_stores`` Zarr groups with ``x`` (rows, width) float32, ``y`` int64 and ``id`` int64.

    ``id`` numbers the rows across all stores, so a shuffle can be checked; ``y``, a label of 10
    values, is sorted in long runs, the case shuffling is for.

    Examples
    --------
    >>> paths = make_example("example-data", n_stores=2, rows_per_store=1000)
    >>> paths
    ['example-data/part-0.zarr', 'example-data/part-1.zarr']
    >>> zarr.open_array(paths[1], path="id")[:3]
    array([1000, 1001, 1002])
    """
    root = Path(root)
    paths = []
    for store in range(n_stores):
        path = root / f"part-{store}.zarr"
        group = zarr.open_group(path, mode="w")
        ids = np.arange(store * rows_per_store, (store + 1) * rows_per_store, dtype=np.int64)
        rng = np.random.default_rng(store)
        x = rng.standard_normal((rows_per_store, width), dtype=np.float32)
        x[:, 0] = ids  # the id is readable from x too: alignment is checkable
        chunk = max(1, 2**20 // (width * 4))
        group.create_array("x", data=x, chunks=(chunk, width), dimension_names=("sample", "feature"))
        group.create_array(
            "y", data=ids * 10 // (n_stores * rows_per_store), chunks=(chunk,), dimension_names=("sample",)
        )
        group.create_array("id", data=ids, chunks=(chunk,), dimension_names=("sample",))
        paths.append(str(path))
    return paths


def _read(store: Path, name: str) -> NDArray[Any]:
    """The variable ``name`` of the Zarr group ``store``, whole."""
    return np.asarray(zarr.open_array(store, path=name, mode="r")[...])


def main(argv: list[str] | None = None) -> None:
    """Run the demo."""
    from distributed import Client, LocalCluster

    import daskshuffle

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default="demo-data", help="where to write the example (default: ./demo-data)")
    parser.add_argument("--rows-per-store", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    began = time.perf_counter()
    sources = make_example(root / "raw", rows_per_store=args.rows_per_store)
    nbytes = sum(array.nbytes for path in sources for _, array in zarr.open_group(path, mode="r").arrays())
    print(f"generated {len(sources)} Zarr stores, {nbytes / 2**20:.0f} MiB, in {time.perf_counter() - began:.1f} s")

    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        print(f"LocalCluster with {args.workers} workers; dashboard: {client.dashboard_link}")
        result = daskshuffle.shuffle_zarr(sources, root / "piles.zarr", n_piles=64, seed=0, progress=True)
        print(
            f"pile store:    {result.n_rows:,} rows in {result.n_piles} piles at {result.path} in {result.seconds:.1f} s"
        )
        copy = daskshuffle.shuffle_zarr(sources, root / "shuffled.zarr", n_piles=64, seed=0, materialize=True)
        print(f"shuffled copy: {copy.n_rows:,} rows at {copy.path} in {copy.seconds:.1f} s")

    ids, x = _read(root / "piles.zarr", "id"), _read(root / "piles.zarr", "x")[:, 0]
    assert np.array_equal(np.sort(ids), np.arange(len(ids))), "the pile store is not a permutation"
    assert np.array_equal(x, ids.astype(np.float32)), "x and id are not aligned"
    shuffled = _read(root / "shuffled.zarr", "id")
    print(f"checked: {len(ids):,} rows, each exactly once, x aligned with id")
    ascending = float(np.mean(np.diff(ids) > 0))
    print(f"first ids of the pile store:    {ids[:8].tolist()}")
    print(
        f"  read directly, a pile store is shuffled ({ascending:.1%} of consecutive ids ascend): each pile is "
        "stored in an order drawn from the seed, and PileLoader deals its chunks into new groups every epoch"
    )
    print(f"first ids of the shuffled copy: {shuffled[:8].tolist()}")
    same = "the same rows in the same order" if np.array_equal(ids, shuffled) else "the same rows"
    print(
        f"throughput: {nbytes / 2**20 / result.seconds:.0f} MiB/s (pile store), "
        f"{nbytes / 2**20 / copy.seconds:.0f} MiB/s (shuffled copy)\n"
        f"  both hold {same}; the copy is cut in larger chunks, for readers that go front to back, and the first "
        "shuffle also pays for the workers' first imports (on data this small, the two figures say little). Piles are the "
        "default because PileLoader reads their small chunks as units and deals them into new groups every epoch: "
        "a new order each epoch, where a copy read front to back repeats one"
    )
    loading = time.perf_counter()
    with daskshuffle.PileLoader(result.path, batch_size=1024, seed=0) as loader:
        loaded = np.concatenate([batch["id"] for batch in loader])
    seconds = time.perf_counter() - loading
    assert np.array_equal(np.sort(loaded), np.sort(ids)), "an epoch of the loader is not a permutation"
    print(
        f"PileLoader: one epoch of {len(loader)} shuffled batches, each row once, in {seconds:.1f} s "
        f"({len(loaded) / seconds:,.0f} rows/s); first ids {loaded[:8].tolist()}"
    )
    print(f"done in {time.perf_counter() - began:.1f} s; the data is in {root}/")


if __name__ == "__main__":
    main()
