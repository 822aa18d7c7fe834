"""Benchmark a moving window kept by append + evict against shuffling the whole window again.

A window of ``--days`` days of data (``--day-size`` each: ``x`` (N, 32) float32
and ``id`` int64) is kept shuffled as a new day arrives, three ways, in one run:

- ``append + evict``: ``daskshuffle.append(store, new_day)`` then
  ``daskshuffle.evict(store, keep_last=days)``: only the new rows move;
- ``reshuffle``: ``daskshuffle.shuffle_zarr(last days, new store)``: every row
  of the window moves again;
- ``copy the day``: ``shutil.copytree`` of the new day's Zarr store: the
  machine's floor for taking in that many bytes.

Then the loader's read speed over the appended store (``--days``
generations) against the reshuffled one (one generation), and after
``compact``. Ratios are against ``reshuffle``. Runs on dask's threaded
scheduler in this process.

Run ``python benchmarks/bench_append.py --help``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zarr
from dask.utils import format_bytes, parse_bytes

import daskshuffle

WIDTH = 32
ROW_NBYTES = WIDTH * 4 + 8


def make_day(path: Path, n_rows: int, first_id: int) -> str:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    chunk = 32_768
    x = group.create_array("x", shape=(n_rows, WIDTH), chunks=(chunk, WIDTH), dtype="f4")
    ids = group.create_array("id", shape=(n_rows,), chunks=(chunk,), dtype="i8")
    x[:] = np.random.default_rng(first_id).standard_normal((n_rows, WIDTH), dtype=np.float32)
    ids[:] = np.arange(first_id, first_id + n_rows)
    return str(path)


def timed(work: Callable[..., object], *args: object, **kwargs: object) -> float:
    start = time.perf_counter()
    work(*args, **kwargs)
    return time.perf_counter() - start


def slide(window: Path, new: str, days: int) -> None:
    daskshuffle.append(window, new)
    daskshuffle.evict(window, keep_last=days)


def read_speed(store: Path, epochs: int = 3) -> float:
    """Rows per second of ``PileLoader``: the best of ``epochs`` epochs."""
    best = 0.0
    with daskshuffle.PileLoader(store, 8192, seed=0) as loader:
        for _ in range(epochs):
            start = time.perf_counter()
            n = sum(len(batch["id"]) for batch in loader)
            best = max(best, n / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--day-size", default="64MiB", help="bytes of one day (default 64MiB)")
    parser.add_argument("--days", type=int, default=7, help="days in the window (default 7)")
    parser.add_argument("--n-piles", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="new days taken in (default 3)")
    parser.add_argument("--dir", default=None, help="where the data goes (default a temporary directory)")
    args = parser.parse_args()

    n_rows = parse_bytes(args.day_size) // ROW_NBYTES
    work = Path(tempfile.mkdtemp(prefix="bench-append-", dir=args.dir))
    try:
        days = [make_day(work / f"day-{d}.zarr", n_rows, d * n_rows) for d in range(args.days + args.rounds)]
        window = work / "window.zarr"
        daskshuffle.shuffle_zarr(days[0], window, args.n_piles, seed=0)
        for day in days[1 : args.days]:
            daskshuffle.append(window, day)
        print(
            f"window of {args.days} days of {format_bytes(parse_bytes(args.day_size))} ({n_rows:,} rows each), "
            f"{args.n_piles} piles; load {os.getloadavg()[0]:.2f}"
        )
        times: dict[str, list[float]] = {"append + evict": [], "reshuffle": [], "copy the day": []}
        for round_ in range(args.rounds):
            new = days[args.days + round_]
            last = days[round_ + 1 : args.days + round_ + 1]
            times["copy the day"].append(timed(shutil.copytree, new, work / "copy.zarr"))
            shutil.rmtree(work / "copy.zarr")
            times["append + evict"].append(timed(slide, window, new, args.days))
            whole = work / "whole.zarr"
            times["reshuffle"].append(timed(daskshuffle.shuffle_zarr, last, whole, args.n_piles, overwrite=True))
        base = statistics.median(times["reshuffle"])
        print("\n| taking in a day | median s | best s | x reshuffle |")
        print("|---|---:|---:|---:|")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"| {name} | {median:.2f} | {min(values):.2f} | {median / base:.2f} |")

        # Read each store twice in turn, keeping the best epoch of each: page cache and load alike for all.
        rows: dict[str, float] = {}
        for _ in range(2):
            for name, store in ((f"{args.days} generations", window), ("reshuffled (1)", work / "whole.zarr")):
                rows[name] = max(rows.get(name, 0.0), read_speed(store))
        daskshuffle.compact(window)
        rows["compacted (1)"] = max(read_speed(window), read_speed(window))
        whole = rows["reshuffled (1)"]
        print("\n| loader over | rows/s | x reshuffled |")
        print("|---|---:|---:|")
        for name, speed in rows.items():
            print(f"| {name} | {speed / 1e6:.2f}M | {speed / whole:.2f} |")
        print(f"load {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
