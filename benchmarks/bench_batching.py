"""The loader's own share of the read path: batching, prefetch and the torch hand-over.

``bench_loader.py`` measures ``PileLoader`` on a real store, where reading and
decoding the piles dominate. This script takes the store's reading out: a
reader that holds ``x`` (N, 64) float32 and ``id`` (N,) int64 in memory and
hands out a pile as views, so what is measured is the loader alone (epoch
plan, background threads, the in-RAM shuffle, gathering each batch):

- ``loader``: a whole epoch of ``PileLoader(batch_size=...)``, rows/s;
- ``wait``: with ``--work-ms`` of work per batch (a sleep), the p50/p99/max
  wait of ``next(batch)`` and the time to the first batch after ``iter``;
- ``torch w=K``: ``DataLoader(PileDataset(...), batch_size=None,
  num_workers=K)``, rows/s, against the loader in one process (the workers
  hold the in-memory reader too, forked).

Run ``python benchmarks/bench_batching.py --help``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

import daskshuffle
from daskshuffle.formats import ArrayRowsMethods
from daskshuffle.loader import _mix
from daskshuffle.readers import PileReader

WIDTH = 64
ROW_NBYTES = WIDTH * 4 + 8


class MemoryPileReader(PileReader[dict[str, np.ndarray]]):
    """A pile store held in memory: ``read_pile`` costs nothing but a view."""

    rows = ArrayRowsMethods()

    def __init__(self, n_rows: int, n_piles: int) -> None:
        rng = np.random.default_rng(0)
        self.arrays = {
            "x": rng.standard_normal((n_rows, WIDTH), dtype=np.float32),
            "id": np.arange(n_rows, dtype=np.int64),
        }
        sizes = rng.multinomial(n_rows, [1 / n_piles] * n_piles)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        self.metadata = {
            "n_rows": n_rows,
            "n_piles": n_piles,
            "pile_offsets": offsets.tolist(),
            "seed": 0,
            "variables": ["x", "id"],
            "fingerprint": "memory",
        }

    def read_rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        return {name: values[start:stop] for name, values in self.arrays.items()}


def use_memory_reader(reader: MemoryPileReader) -> None:
    """Make every loader (in this process and forked workers) read ``reader``."""
    _mix.open_pile_reader = lambda *args, **kwargs: reader  # type: ignore[assignment]


def rows_per_second(loader: daskshuffle.PileLoader) -> float:
    start = time.perf_counter()
    n_rows = sum(len(batch["id"]) for batch in loader)
    return n_rows / (time.perf_counter() - start)


def waits(loader: daskshuffle.PileLoader, work_s: float, n_batches: int) -> tuple[float, list[float]]:
    start = time.perf_counter()
    iterator = iter(loader)
    got: list[float] = []
    first = 0.0
    for index in range(n_batches):
        before = time.perf_counter()
        next(iterator)
        after = time.perf_counter()
        if index == 0:
            first = after - start
        else:
            got.append(after - before)
        time.sleep(work_s)
    return first, got


def torch_rows_per_second(store: str, batch_size: int, workers: int, prefetch: int) -> float:
    from torch.utils.data import DataLoader

    from daskshuffle.torch import PileDataset

    dataset = PileDataset(store, batch_size, prefetch=prefetch)
    loader = DataLoader(dataset, batch_size=None, num_workers=workers, multiprocessing_context="fork")
    start = time.perf_counter()
    n_rows = 0
    for batch in loader:
        n_rows += len(batch["id"])
    return n_rows / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4_194_304, help="rows held in memory (default: 1 GiB)")
    parser.add_argument("--n-piles", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--prefetch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work-ms", type=float, default=1.0)
    parser.add_argument("--workers", type=int, nargs="*", default=[2])
    parser.add_argument("--store", default=None, help="a real pile store to measure as well (path)")
    args = parser.parse_args()

    print(f"load average {os.getloadavg()}")
    reader = MemoryPileReader(args.rows, args.n_piles)
    real_open = _mix.open_pile_reader
    use_memory_reader(reader)
    settings: dict[str, Any] = {"batch_size": args.batch_size, "prefetch": args.prefetch}
    rates = []
    with daskshuffle.PileLoader("memory", **settings) as loader:
        for _ in range(args.repeat):
            rates.append(rows_per_second(loader))
    rate = statistics.median(rates)
    print(
        f"loader, in-memory reader: {rate / 1e6:.2f}M rows/s ({rate * ROW_NBYTES / 1e9:.2f} GB/s), "
        f"rounds {[round(r / 1e6, 2) for r in rates]}"
    )
    with daskshuffle.PileLoader("memory", **settings) as loader:
        first, got = waits(loader, args.work_ms / 1000, min(len(loader), 3000))
    q = np.quantile(got, [0.5, 0.99])
    print(
        f"wait with {args.work_ms} ms of work per batch: first batch {first * 1000:.1f} ms, "
        f"p50 {q[0] * 1000:.3f} ms, p99 {q[1] * 1000:.3f} ms, max {max(got) * 1000:.2f} ms"
    )
    for workers in args.workers:
        torch_rates = [
            torch_rows_per_second("memory", args.batch_size, workers, args.prefetch) for _ in range(args.repeat)
        ]
        torch_rate = statistics.median(torch_rates)
        print(
            f"torch PileDataset w={workers}, in-memory reader: {torch_rate / 1e6:.2f}M rows/s, "
            f"{torch_rate / rate:.2f}x the loader in one process, rounds {[round(r / 1e6, 2) for r in torch_rates]}"
        )
    if args.store:
        _mix.open_pile_reader = real_open  # type: ignore[assignment]
        store = str(Path(args.store))
        store_rates = []
        with daskshuffle.PileLoader(store, **settings) as loader:
            for _ in range(args.repeat):
                store_rates.append(rows_per_second(loader))
        store_rate = statistics.median(store_rates)
        print(f"loader, {store}: {store_rate / 1e6:.2f}M rows/s ({store_rate * ROW_NBYTES / 1e9:.2f} GB/s)")
        with daskshuffle.PileLoader(store, **settings) as loader:
            first, got = waits(loader, args.work_ms / 1000, min(len(loader), 3000))
        q = np.quantile(got, [0.5, 0.99])
        print(
            f"wait with {args.work_ms} ms of work per batch, {store}: first batch {first * 1000:.1f} ms, "
            f"p50 {q[0] * 1000:.3f} ms, p99 {q[1] * 1000:.3f} ms, max {max(got) * 1000:.2f} ms"
        )
        for workers in args.workers:
            torch_rate = statistics.median(
                [torch_rows_per_second(store, args.batch_size, workers, args.prefetch) for _ in range(args.repeat)]
            )
            print(
                f"torch PileDataset w={workers}, {store}: {torch_rate / 1e6:.2f}M rows/s, "
                f"{torch_rate / store_rate:.2f}x the loader in one process"
            )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
