"""Benchmark ``shuffle_zarr`` against what a dask user would otherwise write.

On a generated Zarr group of ``x`` (N, 64) float32 and ``id`` (N,) int64, on a
``LocalCluster`` of two single-threaded worker processes whose memory limits
together are a quarter of the data, this runs, interleaved in one process so
every contender sees the same machine load:

- ``copy``: ``da.from_zarr(src).to_zarr(tmp)`` for both arrays, the floor;
- ``piles``: ``shuffle_zarr(src, dst)``, the pile store;
- ``materialize``: ``shuffle_zarr(src, dst, materialize=True)``, a shuffled copy;
- ``take``: ``x[permutation]`` (and ``id[permutation]``) of dask.array, to Zarr;
- ``dask-shuffle``: ``x.shuffle(indexer, axis=0)`` of dask.array, to Zarr.

The two dask.array alternatives build O(chunks^2) graphs and take minutes at
full size, so by default they run on the first ``--alt-fraction`` of the rows
and their time is scaled up linearly, which flatters them: their work grows
faster than linearly with the size. Their task count is also reported for the
full size with ``--full-graph`` (building those graphs takes minutes and
gigabytes). ``--alt-timeout`` cancels a run that takes too long.

Peak memory is the largest resident set size of each worker process, polled
every 50 ms. Run ``python benchmarks/bench_shuffle_zarr.py --help``.
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
from dataclasses import dataclass, field
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import psutil
import zarr
from _cluster import RestartGuard, memory_limit_for
from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster, wait

import daskshuffle

WIDTH = 64
ROW_NBYTES = WIDTH * 4 + 8
CHUNK_ROWS = 16_384  # 4 MiB chunks of x
CONTENDERS = ("copy", "piles", "materialize", "take", "dask-shuffle")


# -- the data -------------------------------------------------------------------
def make_source(path: Path, n_rows: int, *, chunk_rows: int = CHUNK_ROWS) -> None:
    """Write ``x`` (standard normal, ``x[:, 0] == id``) and ``id``, one chunk row at a time."""
    group = zarr.open_group(path, mode="w", zarr_format=3)
    x = group.create_array("x", shape=(n_rows, WIDTH), chunks=(chunk_rows, WIDTH), dtype="f4")
    ids = group.create_array("id", shape=(n_rows,), chunks=(chunk_rows,), dtype="i8")
    rng = np.random.default_rng(0)
    step = chunk_rows * 16
    for start in range(0, n_rows, step):
        stop = min(start + step, n_rows)
        block = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
        block[:, 0] = np.arange(start, stop)
        x[start:stop] = block
        ids[start:stop] = np.arange(start, stop, dtype=np.int64)
    group.attrs["n_rows"] = n_rows  # written last: a half-written source is regenerated


def open_or_make_source(data: Path, nbytes: int) -> Path:
    n_rows = nbytes // ROW_NBYTES
    path = data / f"source-{format_bytes(nbytes).replace(' ', '')}.zarr"
    if path.exists() and zarr.open_group(path, mode="r").attrs.get("n_rows") == n_rows:
        return path
    print(f"generating {path} ({n_rows:,} rows, {format_bytes(n_rows * ROW_NBYTES)}) ...", flush=True)
    began = time.perf_counter()
    make_source(path, n_rows)
    print(f"  done in {time.perf_counter() - began:.0f} s", flush=True)
    return path


# -- measuring --------------------------------------------------------------------
@dataclass
class Measurement:
    name: str
    seconds: float
    n_tasks: int
    peak_rss: list[int]
    cpu_seconds: float
    scale: float = 1.0  # the run covered 1/scale of the rows
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def full_seconds(self) -> float:
        return self.seconds * self.scale


@dataclass
class Usage:
    peak_rss: list[int]
    cpu_seconds: float = 0.0


class WorkerUsage:
    """The largest resident set size of each worker process, and their CPU time, while the block runs.

    A worker the nanny restarted (it went over its memory limit) shows as -1.
    """

    def __init__(self, client: Client, interval: float = 0.05) -> None:
        self.client = client
        self.interval = interval

    @contextmanager
    def watch(self) -> Iterator[Usage]:
        pids = self.client.run(os.getpid)
        processes = [psutil.Process(pids[address]) for address in sorted(pids)]
        usage = Usage([0] * len(processes))
        peaks = usage.peak_rss
        stop = threading.Event()

        def cpu() -> float:
            try:
                return sum(sum(process.cpu_times()[:2]) for process in processes)
            except psutil.NoSuchProcess:
                return float("nan")

        def poll() -> None:
            while not stop.is_set():
                for index, process in enumerate(processes):
                    try:
                        peaks[index] = max(peaks[index], process.memory_info().rss) if peaks[index] >= 0 else -1
                    except psutil.NoSuchProcess:
                        peaks[index] = -1
                stop.wait(self.interval)

        thread = threading.Thread(target=poll, daemon=True)
        began = cpu()
        thread.start()
        try:
            yield usage
        finally:
            usage.cpu_seconds = cpu() - began
            stop.set()
            thread.join()
            self.client.wait_for_workers(len(processes))


def _rows(src: Path, name: str, n_rows: int) -> da.Array:
    return da.from_zarr(str(src), component=name)[:n_rows]


def _store_all(arrays: dict[str, da.Array], dst: Path) -> list[dask.delayed]:
    zarr.open_group(dst, mode="w", zarr_format=3)
    return [
        array.rechunk({0: CHUNK_ROWS}).to_zarr(str(dst), component=name, compute=False, zarr_format=3)
        for name, array in arrays.items()
    ]


def _run_dask(client: Client, stores: list[dask.delayed], timeout: float | None) -> tuple[float, int, str]:
    n_tasks = len(dask.base.collections_to_expr(stores).__dask_graph__())
    began = time.perf_counter()
    futures = client.compute(stores)
    try:
        wait(futures, timeout=timeout)
    except TimeoutError:
        client.cancel(futures)
        return time.perf_counter() - began, n_tasks, "timed out"
    client.gather(futures)
    return time.perf_counter() - began, n_tasks, ""


def graph_size(arrays: dict[str, da.Array], dst: Path) -> int:
    """Tasks in the graph that writes ``arrays`` to Zarr (built, not run)."""
    scratch = dst.with_suffix(".graph.zarr")
    n_tasks = len(dask.base.collections_to_expr(_store_all(arrays, scratch)).__dask_graph__())
    shutil.rmtree(scratch, ignore_errors=True)
    return n_tasks


def permutation_arrays(src: Path, n_rows: int, how: str, seed: int) -> dict[str, da.Array]:
    """``x`` and ``id`` permuted with one random permutation, the way a dask user would."""
    permutation = np.random.default_rng(seed).permutation(n_rows)
    arrays = {name: _rows(src, name, n_rows) for name in ("x", "id")}
    if how == "take":
        return {name: array[permutation] for name, array in arrays.items()}
    # x.shuffle takes groups of positions that end up in one chunk each; one
    # group per output chunk, in order, is a full permutation.
    indexer = [permutation[start : start + CHUNK_ROWS].tolist() for start in range(0, n_rows, CHUNK_ROWS)]
    return {name: array.shuffle(indexer, axis=0) for name, array in arrays.items()}


# -- the contenders ---------------------------------------------------------------
def run(
    name: str, client: Client, src: Path, out: Path, args: argparse.Namespace, watcher: WorkerUsage, n_rows: int
) -> Measurement:
    dst = out / f"{name}.zarr"
    shutil.rmtree(dst, ignore_errors=True)
    timeout = None
    scale = 1.0
    with watcher.watch() as usage:
        if name == "copy":
            stores = _store_all({var: _rows(src, var, n_rows) for var in ("x", "id")}, dst)
            seconds, n_tasks, note = _run_dask(client, stores, None)
        elif name in ("piles", "materialize"):
            began = time.perf_counter()
            result = daskshuffle.shuffle_zarr(
                str(src),
                dst,
                n_piles=args.n_piles,
                seed=args.seed,
                materialize=name == "materialize",
                block_memory=args.block_memory,
            )
            seconds, n_tasks, note = time.perf_counter() - began, result.n_tasks, ""
        else:
            alt_rows = int(n_rows * args.alt_fraction)
            scale = n_rows / alt_rows
            timeout = args.alt_timeout
            stores = _store_all(permutation_arrays(src, alt_rows, name, args.seed), dst)
            seconds, n_tasks, note = _run_dask(client, stores, timeout)
    measurement = Measurement(name, seconds, n_tasks, usage.peak_rss, usage.cpu_seconds, scale, note)
    if name in ("take", "dask-shuffle") and args.full_graph:
        measurement.extra["full_tasks"] = graph_size(permutation_arrays(src, n_rows, name, args.seed), dst)
    if args.check and not note:
        check(dst, n_rows if scale == 1 else int(n_rows * args.alt_fraction))
    shutil.rmtree(dst, ignore_errors=True)
    return measurement


def check(dst: Path, n_rows: int) -> None:
    """Every id exactly once, and ``x[:, 0]`` aligned with ``id``."""
    group = zarr.open_group(dst, mode="r")
    ids = group["id"][:]
    assert np.array_equal(np.sort(ids), np.arange(n_rows)), f"{dst} is not a permutation"
    first = group["x"][:: max(1, n_rows // 100_000), 0]
    assert np.array_equal(first, ids[:: max(1, n_rows // 100_000)].astype(np.float32)), f"{dst}: x and id disagree"


# -- reporting --------------------------------------------------------------------
def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def report(results: dict[str, list[Measurement]], nbytes: int, memory_limit: int) -> str:
    floor = statistics.median(m.full_seconds for m in results["copy"])
    cpu_floor = statistics.median(m.cpu_seconds * m.scale for m in results["copy"])
    lines = [
        "| contender | wall s (median; all runs) | x copy | worker CPU s | x copy | rows run | tasks "
        "| tasks at full size | peak RSS per worker |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, runs in results.items():
        seconds = statistics.median(m.full_seconds for m in runs)
        first = runs[0]
        ran = "all" if first.scale == 1 else f"1/{first.scale:.0f}, time x{first.scale:.0f}"
        timed_out = any(m.note for m in runs)
        shown = f"> {seconds:.0f}" if timed_out else f"{seconds:.1f}"
        peaks = max((m.peak_rss for m in runs), key=max)
        peak_text = " / ".join("restarted" if peak < 0 else format_bytes(peak) for peak in peaks)
        full_tasks = f"{int(first.extra['full_tasks']):,}" if "full_tasks" in first.extra else "-"
        full_tasks = f"{first.n_tasks:,}" if first.scale == 1 else full_tasks
        all_seconds = ", ".join(f"{m.full_seconds:.1f}" for m in runs)
        cpu = statistics.median(m.cpu_seconds * m.scale for m in runs)
        lines.append(
            f"| {name} | {shown} ({all_seconds}) | {seconds / floor:.2f} | {cpu:.0f} | {cpu / cpu_floor:.2f} | {ran} "
            f"| {first.n_tasks:,} | {full_tasks} | {peak_text} |"
        )
    lines.append("")
    lines.append(f"data {format_bytes(nbytes)}; worker memory limit {format_bytes(memory_limit)} each")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="4GiB", help="bytes of source data (default 4GiB)")
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data", help="where the data goes")
    parser.add_argument("--n-piles", type=int, default=512)
    parser.add_argument("--block-memory", default="64MiB", help="shuffle_zarr's block_memory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every contender, interleaved")
    parser.add_argument("--only", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument("--alt-fraction", type=float, default=1 / 32, help="rows the dask.array alternatives run on")
    parser.add_argument("--alt-timeout", type=float, default=600, help="seconds before an alternative is cancelled")
    parser.add_argument(
        "--full-graph", action="store_true", help="also count the alternatives' tasks at full size (slow, GBs)"
    )
    parser.add_argument("--memory-limit", default=None, help="per worker; default: an eighth of the data")
    parser.add_argument("--check", action="store_true", help="check every output is a permutation")
    args = parser.parse_args(argv)

    nbytes = parse_bytes(args.size)
    args.data.mkdir(parents=True, exist_ok=True)
    src = open_or_make_source(args.data, nbytes)
    n_rows = zarr.open_group(src, mode="r").attrs["n_rows"]
    out = args.data / "out"
    out.mkdir(exist_ok=True)
    memory_limit = memory_limit_for(n_rows * ROW_NBYTES, args.memory_limit)

    print(f"source {src}: {n_rows:,} rows, {format_bytes(n_rows * ROW_NBYTES)}", flush=True)
    print(f"load before: {load()}", flush=True)
    results: dict[str, list[Measurement]] = {name: [] for name in args.only}
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
        watcher = WorkerUsage(client)
        guard = RestartGuard(client, memory_limit)
        for round_ in range(args.repeat):
            for name in args.only:
                measurement = run(name, client, src, out, args, watcher, n_rows)
                results[name].append(measurement)
                peaks = " / ".join(format_bytes(peak) for peak in measurement.peak_rss)
                print(
                    f"round {round_} {name:>12}: {measurement.seconds:7.1f} s "
                    f"(x{measurement.scale:.0f} = {measurement.full_seconds:.1f} s), "
                    f"worker CPU {measurement.cpu_seconds:.1f} s, {measurement.n_tasks:,} tasks, "
                    f"peak RSS {peaks}, load {os.getloadavg()[0]:.1f} {measurement.note}",
                    flush=True,
                )
        guard.close()
    print(f"load after: {load()}")
    if args.check:
        checked = [name for name in args.only if name in ("piles", "materialize", "take", "dask-shuffle")]
        print(f"--check: every output of {', '.join(checked)} holds each id once, with x aligned to id")
    if "copy" in results:
        print()
        print(report(results, n_rows * ROW_NBYTES, memory_limit))
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
