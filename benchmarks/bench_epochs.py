"""Benchmark a fresh full shuffle per epoch, pipelined with training, against waiting for it.

A training loop that takes ``--work-ms`` per batch reads ``--epochs`` epochs of a
Zarr source of ``x`` (N, 16) float32 and ``id`` (N,) int64, three ways, in one run:

- ``pipelined``: ``EpochShuffler(max_concurrent_epochs=2)``: epoch e+1 is
  shuffled on the cluster while epoch e trains;
- ``one at a time``: ``EpochShuffler(max_concurrent_epochs=1)``: the same
  fresh shuffles, each made when its epoch begins (what a loop of
  ``shuffle_zarr`` then ``PileLoader`` does);
- ``piles only``: one shuffle, then ``PileLoader`` reshuffling each pile
  every epoch (no fresh global order: the ceiling for the consumer).

It prints, per contender, the consumer's wait per batch after the first epoch
(p50, p99, max: the time ``next`` takes), the wait for epoch 0's first batch,
and the whole run's time against ``piles only``. The shuffles run on a
``LocalCluster`` of ``--workers`` processes on loopback.

Run ``python benchmarks/bench_epochs.py --help``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from dask.utils import format_bytes, parse_bytes

import daskshuffle

WIDTH = 16
ROW_NBYTES = WIDTH * 4 + 8


def make_source(path: Path, n_rows: int) -> str:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    chunk = 65_536
    x = group.create_array("x", shape=(n_rows, WIDTH), chunks=(chunk, WIDTH), dtype="f4")
    ids = group.create_array("id", shape=(n_rows,), chunks=(chunk,), dtype="i8")
    rng = np.random.default_rng(0)
    for start in range(0, n_rows, chunk * 8):
        stop = min(start + chunk * 8, n_rows)
        x[start:stop] = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
        ids[start:stop] = np.arange(start, stop)
    return str(path)


def train(make: Callable[[], Any], work_s: float) -> tuple[float, list[float], float]:
    """Run the loop; return the first batch's wait, the waits per batch after epoch 0, the total time.

    A wait is the time from the end of one training step to the next batch in
    hand, the wait for the next epoch's loader included.
    """
    start = asked = time.perf_counter()
    first = -1.0
    waits: list[float] = []
    with make() as epochs:
        epochs_iter = iter(epochs)
        epoch = 0
        while True:
            loader = next(epochs_iter, None)
            if loader is None:
                break
            batches: Iterator[dict[str, np.ndarray]] = iter(loader)
            while next(batches, None) is not None:
                waited = time.perf_counter() - asked
                if first < 0:
                    first = waited
                elif epoch > 0:
                    waits.append(waited)
                time.sleep(work_s)  # the training step
                asked = time.perf_counter()
            epoch += 1
    return first, waits, time.perf_counter() - start


def contenders(source: str, work: Path, args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    shuffle_options = {"n_piles": args.n_piles, "progress": False}

    def shuffler(max_concurrent: int) -> Callable[[], Any]:
        return lambda: daskshuffle.EpochShuffler(
            source,
            work / f"epochs-{max_concurrent}",
            n_epochs=args.epochs,
            batch_size=args.batch_size,
            seed=0,
            max_concurrent_epochs=max_concurrent,
            shuffle_options=shuffle_options,
        )

    class PilesOnly:
        def __enter__(self) -> list[daskshuffle.PileLoader]:
            daskshuffle.shuffle_zarr(source, work / "piles.zarr", seed=0, overwrite=True, **shuffle_options)
            self.loader = daskshuffle.PileLoader(work / "piles.zarr", args.batch_size, seed=0)
            return [self.loader] * args.epochs

        def __exit__(self, *exc: object) -> None:
            self.loader.close()
            shutil.rmtree(work / "piles.zarr")

    return {"pipelined": shuffler(2), "one at a time": shuffler(1), "piles only": PilesOnly}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256MiB", help="source size (default 256MiB)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--work-ms", type=float, default=20.0, help="the training step per batch (default 20)")
    parser.add_argument("--n-piles", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the data goes (default a temporary directory)")
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    nbytes = parse_bytes(args.size)
    n_rows = nbytes // ROW_NBYTES
    work = Path(tempfile.mkdtemp(prefix="bench-epochs-", dir=args.dir))
    try:
        source = make_source(work / "source.zarr", n_rows)
        batches = -(-n_rows // args.batch_size)
        print(
            f"{format_bytes(nbytes)} source, {n_rows:,} rows, {args.epochs} epochs of {batches} batches, "
            f"{args.work_ms:g} ms of training per batch ({batches * args.work_ms / 1000:.1f} s an epoch), "
            f"{args.workers} workers; load {os.getloadavg()[0]:.2f}"
        )
        with (
            LocalCluster(n_workers=args.workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as lc,
            Client(lc),
        ):
            rows = {}
            for name, make in contenders(source, work, args).items():
                rows[name] = train(make, args.work_ms / 1000)
        base = rows["piles only"][2]
        print("\n| contender | first batch s | wait p50 ms | wait p99 ms | wait max ms | run s | x piles only |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, (first, waits, total) in rows.items():
            p50, p99, most = (1000 * float(np.percentile(waits, q)) for q in (50, 99, 100))
            print(f"| {name} | {first:.2f} | {p50:.2f} | {p99:.2f} | {most:.0f} | {total:.1f} | {total / base:.2f} |")
        print(f"load {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
