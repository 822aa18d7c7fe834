"""Benchmark ``shuffle_parquet`` against what a dask.dataframe user would otherwise write.

On a generated Parquet dataset of ``--rows`` rows (an int64 ``id``, 16 float32
columns and 2 string columns), in files of 256Ki rows, on a ``LocalCluster`` of
two single-threaded worker processes whose memory limits together are a
quarter of the data in memory (but at least 512 MiB each: an idle worker holds
about 180 MiB), this runs, interleaved in one process so every
contender sees the same machine load:

- ``copy``: ``dd.read_parquet(src).to_parquet(dst)``, the floor;
- ``piles``: ``shuffle_parquet(src, dst)``, the pile store;
- ``materialize``: ``shuffle_parquet(src, dst, materialize=True)``, a shuffled copy;
- ``p2p``: a random key column added to every partition, then
  ``df.shuffle("key", shuffle_method="p2p")`` written with ``to_parquet``
  (cancelled after ``--timeout`` seconds).

Peak memory is the largest resident set size of each worker process, polled
every 50 ms. Run ``python benchmarks/bench_parquet.py --help``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from _cluster import RestartGuard, memory_limit_for
from dask.utils import format_bytes
from distributed import Client, LocalCluster, wait

import daskshuffle

N_FLOATS = 16
FILE_ROWS = 2**18
ROW_GROUP_ROWS = 2**16
CONTENDERS = ("copy", "piles", "materialize", "p2p")


# -- the data -------------------------------------------------------------------
def make_table(first: int, n: int, rng: np.random.Generator) -> pa.Table:
    ids = np.arange(first, first + n, dtype=np.int64)
    columns: dict[str, pa.Array] = {"id": pa.array(ids)}
    floats = rng.standard_normal((N_FLOATS, n), dtype=np.float32)
    for index in range(N_FLOATS):
        columns[f"f{index}"] = pa.array(floats[index])
    columns["name"] = pa.array(np.char.add("user-", ids.astype("U12")))
    columns["city"] = pa.array(np.array(["Paris", "Lagos", "Lima", "Osaka", "Perth"])[ids % 5])
    return pa.table(columns)


def open_or_make_source(data: Path, n_rows: int) -> Path:
    path = data / f"source-{n_rows}.parquet"
    done = path / "_COMPLETE"  # written last: a half-written source is regenerated
    if done.exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    print(f"generating {path} ({n_rows:,} rows) ...", flush=True)
    began = time.perf_counter()
    rng = np.random.default_rng(0)
    for index, first in enumerate(range(0, n_rows, FILE_ROWS)):
        table = make_table(first, min(FILE_ROWS, n_rows - first), rng)
        pq.write_table(table, path / f"part-{index:05d}.parquet", row_group_size=ROW_GROUP_ROWS)
    done.write_text("")
    print(f"  done in {time.perf_counter() - began:.0f} s", flush=True)
    return path


def nbytes_in_memory(src: Path) -> int:
    return sum(pq.ParquetFile(path).read().nbytes for path in sorted(src.glob("*.parquet"))[:1]) * len(
        list(src.glob("*.parquet"))
    )


# -- measuring --------------------------------------------------------------------
def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


class PeakRSS:
    """The largest resident set size of each worker process while a block runs (-1: it was restarted)."""

    def __init__(self, client: Client, interval: float = 0.05) -> None:
        self.client = client
        self.interval = interval

    @contextmanager
    def watch(self) -> Iterator[list[int]]:
        pids = self.client.run(os.getpid)  # again every time: the nanny may have restarted a worker
        processes = [psutil.Process(pids[address]) for address in sorted(pids)]
        peaks = [0] * len(processes)
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                for index, process in enumerate(processes):
                    try:
                        peaks[index] = max(peaks[index], process.memory_info().rss)
                    except psutil.NoSuchProcess:
                        peaks[index] = -1
                stop.wait(self.interval)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield peaks
        finally:
            stop.set()
            thread.join()


# -- the contenders ---------------------------------------------------------------
def _with_random_key(partition: pd.DataFrame) -> pd.DataFrame:
    seed = int(partition["id"].iloc[0]) if len(partition) else 0
    key = np.random.default_rng(seed).random(len(partition))
    return partition.assign(key=key)


def run(
    name: str, client: Client, src: Path, out: Path, args: argparse.Namespace, watcher: PeakRSS
) -> tuple[float, list[int]]:
    dst = out / f"{name}.parquet"
    shutil.rmtree(dst, ignore_errors=True)
    with watcher.watch() as peaks:
        began = time.perf_counter()
        if name == "copy":
            dd.read_parquet(str(src)).to_parquet(str(dst), write_index=False)
        elif name in ("piles", "materialize"):
            daskshuffle.shuffle_parquet(
                src,
                dst,
                n_piles=args.n_piles,
                seed=args.seed,
                materialize=name == "materialize",
                block_memory=args.block_memory,
            )
        else:
            frame = dd.read_parquet(str(src))
            meta = frame._meta.assign(key=np.float64())
            keyed = frame.map_partitions(_with_random_key, meta=meta)
            shuffled = keyed.shuffle("key", shuffle_method="p2p").drop(columns="key")
            future = client.compute(shuffled.to_parquet(str(dst), write_index=False, compute=False))
            try:
                wait(future, timeout=args.timeout)
            except TimeoutError:
                client.cancel(future)
                shutil.rmtree(dst, ignore_errors=True)
                return float("inf"), list(peaks)
            future.result()
        seconds = time.perf_counter() - began
    if args.check:
        ids = pq.read_table(dst, columns=["id"]).column("id").to_numpy()
        assert np.array_equal(np.sort(ids), np.arange(len(ids))), f"{name}: not a permutation"
        assert name == "copy" or not np.array_equal(ids, np.arange(len(ids))), f"{name}: not shuffled"
    shutil.rmtree(dst, ignore_errors=True)
    return seconds, list(peaks)


def report(results: dict[str, list[tuple[float, list[int]]]], nbytes: int, memory_limit: int) -> str:
    floor = statistics.median(seconds for seconds, _ in results["copy"])
    p2p = statistics.median(seconds for seconds, _ in results["p2p"]) if results.get("p2p") else None
    if p2p == float("inf"):
        p2p = None  # timed out: no ratio
    lines = [
        "| contender | seconds (median) | x copy | p2p / this | peak RSS per worker |",
        "|---|---:|---:|---:|---|",
    ]
    for name, runs in results.items():
        seconds = statistics.median(s for s, _ in runs)
        peaks = max((p for _, p in runs), key=max)
        peak_text = " / ".join("restarted" if peak < 0 else format_bytes(peak) for peak in peaks)
        ratio = f"{p2p / seconds:.2f}" if p2p else "-"
        every = ", ".join(f"{s:.1f}" for s, _ in runs)
        shown = "timed out" if seconds == float("inf") else f"{seconds:.1f} ({every})"
        times_copy = "-" if seconds == float("inf") else f"{seconds / floor:.2f}"
        lines.append(f"| {name} | {shown} | {times_copy} | {ratio} | {peak_text} |")
    lines.append("")
    lines.append(f"data {format_bytes(nbytes)} in memory; worker memory limit {format_bytes(memory_limit)} each")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16 * 2**20, help="rows of source data (default 16Mi)")
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data", help="where the data goes")
    parser.add_argument("--n-piles", type=int, default=512)
    parser.add_argument("--block-memory", default="16MiB", help="shuffle_parquet's block_memory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every contender, interleaved")
    parser.add_argument("--only", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument(
        "--memory-limit", default=None, help="per worker; default: an eighth of the data, at least 512 MiB"
    )
    parser.add_argument("--timeout", type=float, default=1200, help="seconds before the p2p shuffle is cancelled")
    parser.add_argument("--check", action="store_true", help="check every output is a permutation")
    args = parser.parse_args(argv)

    args.data.mkdir(parents=True, exist_ok=True)
    src = open_or_make_source(args.data, args.rows)
    nbytes = nbytes_in_memory(src)
    out = args.data / "out"
    out.mkdir(exist_ok=True)
    memory_limit = memory_limit_for(nbytes, args.memory_limit)
    print(f"source {src}: {args.rows:,} rows, {format_bytes(nbytes)} in memory", flush=True)
    print(f"load before: {load()}", flush=True)
    results: dict[str, list[tuple[float, list[int]]]] = {name: [] for name in args.only}
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=":0",
            local_directory=str(out / "workers"),
        ) as cluster,
        Client(cluster) as client,
    ):
        watcher = PeakRSS(client)
        guard = RestartGuard(client, memory_limit)
        for round_ in range(args.repeat):
            for name in args.only:
                seconds, peaks = run(name, client, src, out, args, watcher)
                results[name].append((seconds, peaks))
                shown = " / ".join(format_bytes(peak) for peak in peaks)
                print(f"round {round_} {name:>12}: {seconds:7.1f} s, peak RSS {shown}", flush=True)
        guard.close()
    print(f"load after: {load()}")
    if "copy" in results:
        print()
        print(report(results, nbytes, memory_limit))
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
