"""Benchmark the default loader: units of whole chunks mixed in groups under its budget.

On Zarr pile stores of ``x`` (N, 64) float32 standard normal (stored raw) and
``id`` (N,) int64 (``--size``, one store per ``--pile-mib``), page cache warm:
the plain read of each store's chunk files (``cat``, the ceiling), then
``PileLoader`` with its defaults (units mixed in groups), in a process of its own: rows/s of its best
of two epochs after a first one, the co-batch excess of two epochs (batch-mates
that meet again, over independent shuffles), how many of ``daskshuffle.quality``'s
measures find the first of them as uniform, and the peak memory growth of the
process while the loader runs (``VmHWM``; the ids of the epochs measured are
kept in arrays made before). ``--repeat`` rounds of all of it, one after the
other, so that the contenders of a round share the machine's load; the table
gives each figure's median over the rounds, the load average before and after.

With ``--format parquet``, Parquet pile stores of the same rows (``x`` a
fixed-size list of 64 float32). Run ``python benchmarks/bench_units.py --size
1GiB --pile-mib 4 64 256 --repeat 3``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr

import daskshuffle as ds
from daskshuffle import quality
from daskshuffle._parse import parse_nbytes
from daskshuffle.quality._metrics import cobatch_overlap

ROW_NBYTES = 64 * 4 + 8
#: Rows of a chunk of the source: a block of ``quality.report``'s measure of source chunks per batch.
SOURCE_CHUNK_ROWS = 262_144
LOADERS = ("default",)


def _hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1])
    return 0


def make_parquet_store(data: Path, n_rows: int, pile_mib: int) -> Path:
    """The rows of :func:`make_store` as Parquet (``x`` a fixed-size list of 64 float32), shuffled into piles."""
    store = data / f"units-{n_rows}-{pile_mib}.parquet"
    if store.exists():
        return store
    raw = data / f"units-raw-{n_rows}.parquet"
    if not raw.exists():
        raw.mkdir(parents=True)
        for start in range(0, n_rows, SOURCE_CHUNK_ROWS):
            stop = min(start + SOURCE_CHUNK_ROWS, n_rows)
            x = np.random.default_rng(start).standard_normal((stop - start) * 64, dtype=np.float32)
            table = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x), 64), "id": np.arange(start, stop)})
            pq.write_table(table, raw / f"part-{start:012d}.parquet", row_group_size=SOURCE_CHUNK_ROWS)
    n_piles = max(1, round(n_rows * ROW_NBYTES / (pile_mib * 2**20)))
    ds.shuffle_parquet(str(raw), str(store), n_piles=n_piles, seed=0, pile_memory=f"{2 * pile_mib}MiB")
    return store


def make_store(data: Path, n_rows: int, pile_mib: int, kind: str = "zarr") -> Path:
    if kind == "parquet":
        return make_parquet_store(data, n_rows, pile_mib)
    store = data / f"units-{n_rows}-{pile_mib}.zarr"
    if store.exists():
        return store
    raw = data / f"units-raw-{n_rows}.zarr"
    if not raw.exists():
        group = zarr.open_group(str(raw), mode="w")
        step = SOURCE_CHUNK_ROWS
        x = group.create_array("x", shape=(n_rows, 64), dtype="f4", chunks=(step, 64))
        ids = group.create_array("id", shape=(n_rows,), dtype="i8", chunks=(step,))
        for start in range(0, n_rows, step):
            stop = min(start + step, n_rows)
            x[start:stop] = np.random.default_rng(start).standard_normal((stop - start, 64), dtype=np.float32)
            ids[start:stop] = np.arange(start, stop)
    n_piles = max(1, round(n_rows * ROW_NBYTES / (pile_mib * 2**20)))
    ds.shuffle_zarr(str(raw), str(store), n_piles=n_piles, seed=0, pile_memory=f"{2 * pile_mib}MiB")
    return store


def cat(store: Path) -> float:
    """Seconds to read every chunk file of the store once."""
    start = time.perf_counter()
    for root, _, files in os.walk(store):
        for name in files:
            if name != "zarr.json" and not name.startswith("_"):
                with open(os.path.join(root, name), "rb") as file:
                    file.read()
    return time.perf_counter() - start


def run_loader(store: str, order: str, batch_size: int, n_rows: int, queue: Any) -> None:
    chosen = "piles"
    epochs = [np.empty(n_rows, dtype=np.int64) for _ in range(2)]
    for ids in epochs:
        ids[:] = 0  # touched before the baseline
    before = _hwm_kib()
    seconds = []
    with ds.PileLoader(store, batch_size, seed=1, order=chosen) as loader:
        for epoch in range(3):
            start, filled = time.perf_counter(), 0
            for batch in loader:
                rows = batch["id"]
                if epoch:
                    epochs[epoch - 1][filled : filled + len(rows)] = rows
                filled += len(rows)
            seconds.append(time.perf_counter() - start)
        settings, n_piles = loader.settings, loader.n_piles
    growth = (_hwm_kib() - before) / 1024
    measure = cobatch_overlap(epochs[0], epochs[1], batch_size)
    within = quality.report(epochs[0], batch_size=batch_size, n_piles=n_piles, block_size=SOURCE_CHUNK_ROWS)
    uniform = f"{int((within['verdict'] == 'as uniform').sum())} of {len(within)}"
    queue.put((n_rows / min(seconds[1:]), measure.value / measure.uniform, growth, settings, uniform))


def _held(settings: Any) -> str:
    return f"units of {settings.unit_rows:,} rows, groups of {settings.group_rows:,}"


def measure(store: Path, n_rows: int, batch_size: int, repeat: int) -> dict[str, list[Any]]:
    """Every round's figures of ``cat`` and of each loader."""
    context = multiprocessing.get_context("spawn")
    found: dict[str, list[Any]] = {"cat": [], **{name: [] for name in LOADERS}}
    cat(store)
    for _ in range(repeat):
        found["cat"].append(n_rows / cat(store))
        for order in LOADERS:
            queue = context.Queue()
            process = context.Process(target=run_loader, args=(str(store), order, batch_size, n_rows, queue))
            process.start()
            found[order].append(queue.get())
            process.join()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", default="256MiB")
    parser.add_argument("--pile-mib", type=int, nargs="+", default=[4])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--format", choices=("zarr", "parquet"), default="zarr", help="The pile store's format.")
    args = parser.parse_args()
    n_rows = parse_nbytes(args.size, "size") // ROW_NBYTES
    args.data.mkdir(parents=True, exist_ok=True)
    stores = {pile_mib: make_store(args.data, n_rows, pile_mib, args.format) for pile_mib in args.pile_mib}
    print(f"{n_rows:,} rows of {ROW_NBYTES} bytes; medians of {args.repeat} rounds; load {os.getloadavg()[0]:.1f}")
    print("| piles | loader | rows/s | of cat | excess (x independent) | epoch uniform | peak growth | held |")
    print("|---|---|---:|---:|---:|---|---:|---|")
    for pile_mib, store in stores.items():
        found = measure(store, n_rows, args.batch_size, args.repeat)
        ceiling = statistics.median(found["cat"])
        print(f"| {pile_mib} MiB | `cat` | {ceiling / 1e6:.2f}M | 1.00 | | | | |")
        for order in LOADERS:
            rows = found[order]
            rate = statistics.median(r for r, *_ in rows)
            excess = statistics.median(e for _, e, _, _, _ in rows)
            growth = statistics.median(g for _, _, g, _, _ in rows)
            uniform = ", ".join(sorted({u for *_, u in rows}))
            each = ", ".join(f"{r / 1e6:.2f}" for r, *_ in rows)
            print(
                f"| {pile_mib} MiB | {order} | {rate / 1e6:.2f}M ({each}) | {rate / ceiling:.2f} "
                f"| {excess:.2f} | {uniform} | {growth:.0f} MiB | {_held(rows[0][3])} |"
            )
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
