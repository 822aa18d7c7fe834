"""Benchmark ``PileLoader`` against what a training script would otherwise do.

On a pile store of ``x`` (N, 64) float32 and ``id`` (N,) int64, in one process,
each contender hands out batches of ``--batch-size`` rows and does nothing else:

- ``sequential``: read the store front to back in runs of whole chunks of
  about a pile and cut them into batches, no shuffle at all: the ceiling for
  reading this store;
- ``sequential-ahead``: the same with the next run read in a background thread,
  as the loader does: the ceiling with the loader's double buffering;
- ``loader``: ``PileLoader(store, batch_size)``, a whole epoch (``--prefetch``);
- ``random-oindex``: one random minibatch at a time through Zarr orthogonal
  indexing (``x.oindex[sorted(idx)]``), what people try first;
- ``torch-random``: ``torch.utils.data.DataLoader`` with a ``RandomSampler``
  over a map-style dataset that reads one row of the Zarr arrays per item
  (only if torch is installed);
- ``torch PileDataset w=2``: ``DataLoader(daskshuffle.torch.PileDataset(...),
  batch_size=None, num_workers=2)``, the loader in two worker processes, as tensors.

The two random-access contenders would take hours for an epoch: they run for
``--random-seconds`` each and their rows/s is extrapolated to an epoch, which
is said next to their numbers. Contenders run interleaved for ``--repeat``
rounds so that they see the same machine load.

Then the consumer's side: with ``--work-ms`` of work per batch (a sleep, as a
GPU step leaves the CPU free), how long does each ``next(batch)`` wait? The
first batch waits for the first pile; after that the background reads should
keep ahead. Two epochs run, so the wait at the start of the second epoch shows
whether its first pile was read ahead too.

The data is generated on first use under ``--data`` and kept. It is read
through the operating system's page cache like any recently written file:
these are decompression and CPU numbers more than disk numbers.

Run ``python benchmarks/bench_loader.py --help``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import zarr
from dask.utils import format_bytes, parse_bytes

import daskshuffle

WIDTH = 64
ROW_NBYTES = WIDTH * 4 + 8
SOURCE_CHUNK_ROWS = 16_384  # 4 MiB chunks of x


# -- the data --------------------------------------------------------------------
def make_source(path: Path, n_rows: int) -> None:
    """``x`` standard normal with ``x[:, 0] == id``, and ``id``: the shuffle benchmark's layout."""
    group = zarr.open_group(path, mode="w", zarr_format=3)
    x = group.create_array("x", shape=(n_rows, WIDTH), chunks=(SOURCE_CHUNK_ROWS, WIDTH), dtype="f4")
    ids = group.create_array("id", shape=(n_rows,), chunks=(SOURCE_CHUNK_ROWS,), dtype="i8")
    rng = np.random.default_rng(0)
    step = SOURCE_CHUNK_ROWS * 16
    for start in range(0, n_rows, step):
        stop = min(start + step, n_rows)
        block = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
        block[:, 0] = np.arange(start, stop)
        x[start:stop] = block
        ids[start:stop] = np.arange(start, stop, dtype=np.int64)
    group.attrs["n_rows"] = n_rows  # last: a half-written source is made again


def open_or_make_store(data: Path, nbytes: int, n_piles: int, chunk_rows: int | None, source: Path | None) -> str:
    if source is None:
        n_rows = nbytes // ROW_NBYTES
        name = format_bytes(nbytes).replace(" ", "")
        source = data / f"loader-source-{name}.zarr"
        if not (source.exists() and zarr.open_group(source, mode="r").attrs.get("n_rows") == n_rows):
            print(f"generating {source} ({n_rows:,} rows) ...", flush=True)
            make_source(source, n_rows)
    else:
        name = source.stem
    piles = data / f"loader-piles-{name}-{n_piles}-{chunk_rows or 'auto'}.zarr"
    try:
        daskshuffle.PileLoader(piles, 1).close()
    except daskshuffle.DaskShuffleError:
        print(f"shuffling into {piles} ...", flush=True)
        print(" ", daskshuffle.shuffle_zarr(source, piles, n_piles, seed=0, chunk_rows=chunk_rows, overwrite=True))
    return str(piles)


# -- the contenders --------------------------------------------------------------
def _run_rows(group: zarr.Group, metadata: dict) -> int:
    """Rows per sequential read: a pile's worth, rounded up to whole chunks, so no chunk is read twice."""
    chunk_rows = int(group["x"].chunks[0])
    return -(-max(1, metadata["n_rows"] // metadata["n_piles"]) // chunk_rows) * chunk_rows


def sequential(store: str, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    group = zarr.open_group(store, mode="r")
    metadata = group.attrs["daskshuffle"]
    arrays = {name: group[name] for name in metadata["variables"]}
    step = _run_rows(group, metadata)
    for start in range(0, metadata["n_rows"], step):
        rows = {name: array[start : start + step] for name, array in arrays.items()}
        n = len(rows["id"])
        for first in range(0, n, batch_size):
            yield {name: values[first : first + batch_size] for name, values in rows.items()}


def sequential_ahead(store: str, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    """``sequential`` with the next run read in a background thread while this one is handed out."""
    group = zarr.open_group(store, mode="r")
    metadata = group.attrs["daskshuffle"]
    arrays = {name: group[name] for name in metadata["variables"]}
    step = _run_rows(group, metadata)

    def read(start: int) -> dict[str, np.ndarray]:
        return {name: array[start : start + step] for name, array in arrays.items()}

    starts = range(0, metadata["n_rows"], step)
    with ThreadPoolExecutor(max_workers=1) as executor:
        ahead = executor.submit(read, starts[0])
        for index in range(len(starts)):
            rows = ahead.result()
            if index + 1 < len(starts):
                ahead = executor.submit(read, starts[index + 1])
            for first in range(0, len(rows["id"]), batch_size):
                yield {name: values[first : first + batch_size] for name, values in rows.items()}


def loader(store: str, batch_size: int, prefetch: int) -> Iterator[dict[str, np.ndarray]]:
    with daskshuffle.PileLoader(store, batch_size, prefetch=prefetch) as piles:
        yield from piles


def random_oindex(store: str, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    group = zarr.open_group(store, mode="r")
    arrays = {name: group[name] for name in group.attrs["daskshuffle"]["variables"]}
    n_rows = group.attrs["daskshuffle"]["n_rows"]
    rng = np.random.default_rng(0)
    while True:
        index = np.sort(rng.choice(n_rows, size=batch_size, replace=False))
        yield {name: array.oindex[index] for name, array in arrays.items()}


def torch_random(store: str, batch_size: int) -> Iterator[dict[str, object]]:
    import torch
    from torch.utils.data import DataLoader, Dataset, RandomSampler

    class ZarrRows(Dataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            group = zarr.open_group(store, mode="r")
            self.arrays = {name: group[name] for name in group.attrs["daskshuffle"]["variables"]}
            self.n_rows = group.attrs["daskshuffle"]["n_rows"]

        def __len__(self) -> int:
            return self.n_rows

        def __getitem__(self, index: int) -> dict[str, np.ndarray]:
            return {name: array[index] for name, array in self.arrays.items()}

    dataset = ZarrRows()
    generator = torch.Generator().manual_seed(0)
    yield from DataLoader(dataset, batch_size=batch_size, sampler=RandomSampler(dataset, generator=generator))


def torch_piles(store: str, batch_size: int, num_workers: int) -> Iterator[dict[str, object]]:
    from torch.utils.data import DataLoader

    from daskshuffle.torch import PileDataset

    yield from DataLoader(PileDataset(store, batch_size), batch_size=None, num_workers=num_workers)


def run(batches: Iterator[dict[str, object]], *, seconds: float | None = None) -> tuple[int, float]:
    """Rows handed out and seconds taken, stopping after ``seconds`` if given."""
    rows = 0
    began = time.perf_counter()
    for batch in batches:
        rows += len(batch["id"])  # type: ignore[arg-type]
        if seconds is not None and time.perf_counter() - began > seconds:
            break
    return rows, time.perf_counter() - began


def waits(store: str, batch_size: int, prefetch: int, work_seconds: float, epochs: int) -> list[list[float]]:
    """Seconds each ``next()`` waited, per epoch, with ``work_seconds`` of work per batch."""
    out: list[list[float]] = []
    with daskshuffle.PileLoader(store, batch_size, prefetch=prefetch) as piles:
        for _ in range(epochs):
            epoch: list[float] = []
            iterator = iter(piles)
            while True:
                began = time.perf_counter()
                batch = next(iterator, None)
                epoch.append(time.perf_counter() - began)
                if batch is None:
                    break
                time.sleep(work_seconds)
            out.append(epoch[:-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1GiB", help="bytes of data (default 1GiB)")
    parser.add_argument("--store", default=None, help="an existing pile store to read instead of generating one")
    parser.add_argument("--source", type=Path, default=None, help="an existing source of x and id to shuffle")
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data", help="where the data goes")
    parser.add_argument("--n-piles", type=int, default=64, help="piles of the generated store (default 64)")
    parser.add_argument("--chunk-rows", type=int, default=None, help="rows per chunk of the generated store")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--prefetch", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2, help="rounds of every contender, interleaved")
    parser.add_argument("--random-seconds", type=float, default=20.0, help="time box of each random-access contender")
    parser.add_argument("--work-ms", type=float, default=1.0, help="work per batch while measuring waits")
    args = parser.parse_args()

    args.data.mkdir(parents=True, exist_ok=True)
    store = args.store or open_or_make_store(
        args.data, parse_bytes(args.size), args.n_piles, args.chunk_rows, args.source
    )
    group = zarr.open_group(store, mode="r")
    metadata = group.attrs["daskshuffle"]
    n_rows, n_piles = metadata["n_rows"], metadata["n_piles"]
    nbytes = sum(group[name].nbytes for name in metadata["variables"])
    print(
        f"store {store}: {n_rows:,} rows, {format_bytes(nbytes)}, {n_piles} piles of ~{format_bytes(nbytes // n_piles)}, "
        f"chunks of {group['x'].chunks[0]:,} rows, batch_size={args.batch_size}",
        flush=True,
    )

    contenders: dict[str, Callable[[], tuple[int, float]]] = {
        "sequential": lambda: run(sequential(store, args.batch_size)),
        "sequential-ahead": lambda: run(sequential_ahead(store, args.batch_size)),
        **{
            f"loader prefetch={p}": (lambda p=p: run(loader(store, args.batch_size, p)))  # type: ignore[misc]
            for p in args.prefetch
        },
        "random-oindex": lambda: run(random_oindex(store, args.batch_size), seconds=args.random_seconds),
    }
    try:
        import torch  # noqa: F401

        contenders["torch-random"] = lambda: run(torch_random(store, args.batch_size), seconds=args.random_seconds)
        contenders["torch PileDataset w=2"] = lambda: run(torch_piles(store, args.batch_size, 2))
    except ImportError:
        print("torch is not installed: skipping torch-random")

    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(args.repeat):
        for name, contender in contenders.items():
            rows, seconds = contender()
            rates[name].append(rows / seconds)
            print(
                f"  round {round_}: {name:<20} {rows:>12,} rows in {seconds:7.2f} s = {rows / seconds:>12,.0f} rows/s"
            )

    print(
        f"\nrows/s, best and median of {args.repeat} (random access extrapolated from {args.random_seconds:g} s boxes)"
    )
    best = {name: max(values) for name, values in rates.items()}
    for name, rate in best.items():
        epoch = n_rows / rate
        note = "  (extrapolated)" if name in ("random-oindex", "torch-random") else ""
        print(
            f"  {name:<20} {rate:>12,.0f} rows/s (median {statistics.median(rates[name]):>12,.0f})  "
            f"{rate * ROW_NBYTES / 2**20:8.1f} MiB/s  epoch {epoch:>10,.1f} s{note}"
        )
    for name, rate in best.items():
        if name.startswith(("loader", "torch PileDataset")):
            ratios = ", ".join(
                f"{rate / best[other]:,.0f}x {other}" for other in ("random-oindex", "torch-random") if other in best
            )
            print(
                f"  {name}: {rate / best['sequential']:.0%} of sequential, "
                f"{rate / best['sequential-ahead']:.0%} of sequential-ahead; {ratios}"
            )

    work = args.work_ms / 1000
    for prefetch in args.prefetch:
        per_epoch = waits(store, args.batch_size, prefetch, work, epochs=2)
        after_first = per_epoch[0][1:] + per_epoch[1][1:]
        ms = sorted(1000 * wait for wait in after_first)
        print(
            f"\nwait per batch, prefetch={prefetch}, {args.work_ms:g} ms of work per batch, two epochs:\n"
            f"  first batch of epoch 0 {1000 * per_epoch[0][0]:.1f} ms, of epoch 1 {1000 * per_epoch[1][0]:.1f} ms\n"
            f"  every other batch: p50 {statistics.median(ms):.3f} ms, p99 {ms[int(0.99 * (len(ms) - 1))]:.3f} ms, "
            f"max {ms[-1]:.1f} ms over {len(ms):,} batches"
        )


if __name__ == "__main__":
    main()
