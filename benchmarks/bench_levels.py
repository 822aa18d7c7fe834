"""Benchmark one level against two and three past the knee, where the merge's reads get small.

A Zarr group of ``x`` (N, 16) float32 and ``id`` (N,) int64 in chunks of
``--chunk-rows`` is shuffled into ``--n-piles`` piles on a ``LocalCluster`` of
two single-threaded worker processes on loopback, interleaved for ``--repeat``
rounds:

- ``copy``: ``da.from_zarr(src).to_zarr(tmp)`` of both arrays, the floor;
- ``large blocks``: ``shuffle_zarr`` with ``--large-block`` (one level: the
  reads are large because blocks are large against the data);
- ``small blocks, 1 level``: ``--small-block`` blocks and ``levels=1``: the
  single level past the knee, as 64 MiB blocks are against 64 GiB and more;
- ``small blocks, 2 levels`` and ``3 levels``: the same blocks, ``levels=2`` and ``3``.

Each row gives the wall time, its ratio to the copy and to large blocks, and
from the plan the number and typical size of the merge's reads (and of the
later levels' reads of earlier pieces). Scaling the data and the block
together keeps ``block / data`` the same: 64 MiB of data in 64 KiB blocks is
what 64 GiB is in 64 MiB blocks.

Run ``python benchmarks/bench_levels.py --help``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import dask.array as da
import numpy as np
import zarr
from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster

import daskshuffle
from daskshuffle.plan._levels import auto_levels, fanout_for, level_read_nbytes, merge_read_nbytes

WIDTH = 16
ROW_NBYTES = WIDTH * 4 + 8


def make_source(path: Path, n_rows: int, chunk_rows: int) -> str:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    x = group.create_array("x", shape=(n_rows, WIDTH), chunks=(chunk_rows, WIDTH), dtype="f4", compressors=None)
    ids = group.create_array("id", shape=(n_rows,), chunks=(chunk_rows,), dtype="i8", compressors=None)
    step = max(chunk_rows, 2**20 // chunk_rows * chunk_rows)
    rng = np.random.default_rng(0)
    for start in range(0, n_rows, step):
        stop = min(start + step, n_rows)
        x[start:stop] = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
        ids[start:stop] = np.arange(start, stop)
    return str(path)


def copy(src: str, dst: Path) -> None:
    for name in ("x", "id"):
        da.from_zarr(src, component=name).to_zarr(str(dst), component=name, overwrite=True)


def reads(nbytes: int, block: int, n_piles: int, levels: int | str) -> str:
    """The merge's reads, from the plan's arithmetic: how many, and about how large."""
    n_blocks = -(-nbytes // block)
    n_groups = -(-nbytes // block)
    depth = auto_levels(nbytes, block, n_blocks, n_piles, "local") if levels == "auto" else int(levels)
    if depth == 1:
        return f"{n_blocks * n_groups:,} of {format_bytes(int(merge_read_nbytes(nbytes, block, block)))}"
    fanout = fanout_for(nbytes, block, n_piles, depth)
    earlier, merge = level_read_nbytes(nbytes, block, n_piles, depth)
    n_super = fanout ** (depth - 1)
    later = f"{depth - 1} x {n_blocks * fanout:,} of {format_bytes(int(earlier))}"
    return f"{n_blocks * n_groups // n_super:,} of {format_bytes(int(merge))} (+ {later} of earlier pieces, S={fanout})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="64MiB", help="bytes of data (default 64MiB)")
    parser.add_argument("--chunk-rows", type=int, default=1024, help="source chunk rows (default 1024: 64 KiB of x)")
    parser.add_argument("--small-block", default="64KiB", help="block_memory past the knee (default 64KiB)")
    parser.add_argument("--large-block", default="64MiB", help="block_memory before it (default 64MiB)")
    parser.add_argument("--n-piles", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the data goes (default a temporary directory)")
    args = parser.parse_args()

    nbytes = parse_bytes(args.size)
    n_rows = nbytes // ROW_NBYTES
    small, large = parse_bytes(args.small_block), parse_bytes(args.large_block)
    work = Path(tempfile.mkdtemp(prefix="bench-levels-", dir=args.dir))
    try:
        src = make_source(work / "src.zarr", n_rows, args.chunk_rows)
        contenders = {
            "copy": (lambda: copy(src, work / "copy.zarr"), "-"),
            "large blocks": (
                lambda: daskshuffle.shuffle_zarr(
                    src, work / "out.zarr", args.n_piles, seed=0, overwrite=True, block_memory=large, levels=1
                ),
                reads(nbytes, large, args.n_piles, 1),
            ),
            "small blocks, 1 level": (
                lambda: daskshuffle.shuffle_zarr(
                    src, work / "out.zarr", args.n_piles, seed=0, overwrite=True, block_memory=small, levels=1
                ),
                reads(nbytes, small, args.n_piles, 1),
            ),
            **{
                f"small blocks, {levels} levels": (
                    lambda levels=levels: daskshuffle.shuffle_zarr(
                        src, work / "out.zarr", args.n_piles, seed=0, overwrite=True, block_memory=small, levels=levels
                    ),
                    reads(nbytes, small, args.n_piles, levels),
                )
                for levels in (2, 3)
            },
        }
        print(
            f"{format_bytes(nbytes)} ({n_rows:,} rows of {ROW_NBYTES} B, chunks of {args.chunk_rows} rows), "
            f"{args.n_piles} piles, blocks {format_bytes(small)} / {format_bytes(large)}; "
            f"load {os.getloadavg()[0]:.2f}"
        )
        times: dict[str, list[float]] = {name: [] for name in contenders}
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as cluster,
            Client(cluster),
        ):
            for _ in range(args.repeat):
                for name, (run, _) in contenders.items():
                    start = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - start)
        floor, large_time = statistics.median(times["copy"]), statistics.median(times["large blocks"])
        print("\n| contender | wall s (median) | x copy | x large blocks | merge reads (plan) |")
        print("|---|---:|---:|---:|---|")
        for name, (_, described) in contenders.items():
            median = statistics.median(times[name])
            print(f"| {name} | {median:.1f} | {median / floor:.2f} | {median / large_time:.2f} | {described} |")
        print(f"load {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
