"""Benchmark the default loader of a store whose piles are stored shuffled, against one pile at a time.

On a Zarr pile store of ``x`` (N, 64) float32 and ``id`` (N,) int64 (``--size``,
piles of ``--pile-mib``), page cache warm, in one process: the plain read of the
store's chunk files (``cat``, the ceiling), ``PileLoader`` with its defaults
(units mixed in groups) and with ``Piles(piles_in_memory=1)``, each a whole
epoch in rows/s; the co-batch excess of two epochs of each (batch-mates that
meet again, over independent shuffles), and the peak memory growth of each
loader (``VmHWM``, each loader in a process of its own).

Run ``python benchmarks/bench_units.py --size 1GiB --pile-mib 4``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import zarr

import daskshuffle as ds
from daskshuffle._parse import parse_nbytes
from daskshuffle.quality._metrics import cobatch_overlap

ROW_NBYTES = 64 * 4 + 8


def _hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1])
    return 0


def make_store(data: Path, n_rows: int, pile_mib: int) -> Path:
    store = data / f"units-{n_rows}-{pile_mib}.zarr"
    if store.exists():
        return store
    raw = data / f"units-raw-{n_rows}.zarr"
    if not raw.exists():
        group = zarr.open_group(str(raw), mode="w")
        step = 262_144
        x = group.create_array("x", shape=(n_rows, 64), dtype="f4", chunks=(step, 64))
        ids = group.create_array("id", shape=(n_rows,), dtype="i8", chunks=(step,))
        for start in range(0, n_rows, step):
            stop = min(start + step, n_rows)
            x[start:stop] = np.random.default_rng(start).random((stop - start, 64), dtype=np.float32)
            ids[start:stop] = np.arange(start, stop)
    n_piles = max(1, n_rows * ROW_NBYTES // (pile_mib * 2**20))
    ds.shuffle_zarr(str(raw), str(store), n_piles=n_piles, seed=0)
    return store


def cat(store: Path) -> float:
    """Seconds to read every chunk file of the store once."""
    start = time.perf_counter()
    for root, _, files in os.walk(store):
        for name in files:
            if name != "zarr.json":
                with open(os.path.join(root, name), "rb") as file:
                    file.read()
    return time.perf_counter() - start


def run_loader(store: str, order: str, batch_size: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    chosen = ds.orders.Piles(piles_in_memory=1) if order == "one pile" else "piles"
    before = _hwm_kib()
    with ds.PileLoader(store, batch_size, seed=1, order=chosen) as loader:
        epochs, seconds = [], []
        for _ in range(3):
            start = time.perf_counter()
            ids = [batch["id"].copy() for batch in loader]
            seconds.append(time.perf_counter() - start)
            epochs.append(np.concatenate(ids))
        settings = loader.settings
    growth = (_hwm_kib() - before) / 1024
    measure = cobatch_overlap(epochs[1], epochs[2], batch_size)
    queue.put((min(seconds[1:]), measure.value / measure.uniform, growth, settings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", default="256MiB")
    parser.add_argument("--pile-mib", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    args = parser.parse_args()
    n_rows = parse_nbytes(args.size, "size") // ROW_NBYTES
    args.data.mkdir(parents=True, exist_ok=True)
    store = make_store(args.data, n_rows, args.pile_mib)
    cat(store)
    raw = min(cat(store) for _ in range(2))
    print(f"{n_rows:,} rows, piles of {args.pile_mib} MiB; cat {n_rows / raw / 1e6:.2f}M rows/s")
    print("| loader | rows/s | of cat | excess (x independent) | peak growth | settings |")
    print("|---|---|---|---|---|---|")
    context = multiprocessing.get_context("spawn")
    for order in ("default", "one pile"):
        queue = context.Queue()
        process = context.Process(target=run_loader, args=(str(store), order, args.batch_size, queue))
        process.start()
        seconds, excess, growth, settings = queue.get()
        process.join()
        held = (
            f"unit {settings.unit_rows:,} rows, group {settings.group_rows:,}"
            if settings.unit_rows
            else f"{settings.piles_in_memory} pile(s)"
        )
        rate = n_rows / seconds
        print(f"| {order} | {rate / 1e6:.2f}M | {raw / seconds:.2f} | {excess:.2f} | {growth:.0f} MiB | {held} |")


if __name__ == "__main__":
    main()
