"""The scale model's table from 1 GiB to 100 TiB, and what drawing a plan costs the client.

    python benchmarks/bench_plan.py

First, ``daskshuffle.explain`` for 1 KiB rows at 1 GiB, 100 GiB, 1 TiB, 10 TiB and
100 TiB with the defaults (512 piles, or ``n_piles="auto"`` where 512 piles would
not fit the default 256 MiB; 64 MiB blocks, pieces on object storage, 100 tasks at a time): levels, tasks, reads
and their size, the plan on the client and the request latency of the reads.
Then what planning costs the client, timed with its peak memory (``tracemalloc``):
the planning a shuffle runs (levels as ``levels="auto"`` picks them on object
storage, 256-byte rows in 64 MiB blocks, 16,384 piles of up to 4 GiB) from 1e8 to 1e11 rows,
and the single-level ``make_plan`` (a ``blocks x piles`` matrix) for comparison.
Last, the task graphs of shuffles of two and three levels of a real Zarr source
cut into ``--graph-blocks`` blocks: the time to build them and their pickled size.
"""

from __future__ import annotations

import argparse
import pickle
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr

import daskshuffle
from daskshuffle.plan._plan import make_plan
from daskshuffle.plan._scale_model import format_duration, format_size
from daskshuffle.shuffle._graph import shuffle_graph
from daskshuffle.shuffle._store_plan import plan_within_budget
from daskshuffle.sources import open_zarr_sources
from daskshuffle.storage._location import Location

#: A 64 MiB block of 256-byte rows.
BLOCK_ROWS = 2**18


def _traced(work: Callable[[], Any]) -> tuple[Any, float, int]:
    tracemalloc.start()
    start = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, seconds, peak


def _graph_size(n_blocks: int, n_piles: int) -> None:
    """Build the graphs of shuffles of two and three levels of ``n_blocks`` one-row blocks of a real Zarr source."""
    print("\n| blocks | piles | levels | tasks | built in | peak memory | pickled | pickled in |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        group = zarr.open_group(Path(tmp) / "raw.zarr", mode="w")
        group.create_array("x", shape=(n_blocks,), chunks=(1,), dtype="f8")  # its metadata is all a plan reads
        fmt = open_zarr_sources(str(Path(tmp) / "raw.zarr"), block_nbytes=8)
        for levels in (2, 3):
            plan = plan_within_budget(fmt.block_lengths, n_piles, 0, 8, 2**30, levels=levels, block_nbytes=8)

            def build(plan: Any = plan) -> Any:
                return shuffle_graph(
                    fmt,
                    plan,
                    tmp=Location.of(f"{tmp}/t"),
                    dst=Location.of(f"{tmp}/d"),
                    merge_nbytes=8,
                )

            start = time.perf_counter()
            graph, _ = build()
            seconds = time.perf_counter() - start  # untraced: tracemalloc slows Python down
            peak = _traced(build)[2]
            start = time.perf_counter()
            nbytes = len(pickle.dumps(graph, protocol=5))
            pickling = time.perf_counter() - start
            print(
                f"| {n_blocks:,} | {n_piles:,} | {levels} | {len(graph):,} | {seconds:.2f} s | {format_size(peak)} "
                f"| {format_size(nbytes)} | {pickling:.2f} s |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=100, help="tasks at a time, for the latency (default 100)")
    parser.add_argument("--plans", type=int, nargs="*", default=[1_000, 4_000, 16_000], help="blocks to make_plan")
    parser.add_argument("--rows", type=float, nargs="*", default=[1e8, 1e9, 1e10, 1e11], help="rows to plan")
    parser.add_argument("--graph-blocks", type=int, default=100_000, help="blocks of the graph built (0: none)")
    args = parser.parse_args()

    print(
        "| data | levels | piles | pass-1 tasks | merge tasks | pass-2 reads | merge reads | plan on the client | latency at 10-50 ms, 100 at a time |"
    )
    print("|---|---:|---:|---:|---:|---|---|---:|---|")
    for label, size in (
        ("1 GiB", 2**30),
        ("100 GiB", 100 * 2**30),
        ("1 TiB", 2**40),
        ("10 TiB", 10 * 2**40),
        ("100 TiB", 100 * 2**40),
    ):
        n_piles = None if size // 512 <= 256 * 2**20 else "auto"  # 512 piles, where they fit 256 MiB
        m = daskshuffle.explain(size // 1024, 1024, n_piles=n_piles, workers=args.workers)
        second = f"{m.n_first_reads:,} of {format_size(m.first_read_nbytes)}" if m.levels > 1 else "-"
        fast, slow = (m.latency_seconds(latency) for latency in (0.010, 0.050))
        print(
            f"| {label} | {m.levels} | {m.n_piles:,} | {m.n_blocks:,} | {m.n_groups:,} | {second} | "
            f"{m.n_reads:,} of {format_size(m.read_nbytes)} | {format_size(m.plan_nbytes)} | {format_duration(fast)} to {format_duration(slow)} |"
        )
    print("\n| rows | blocks | levels | fanouts | planned in | peak memory (traced) |")
    print("|---:|---:|---:|---|---:|---:|")
    for rows in args.rows:
        n_blocks = -(-int(rows) // BLOCK_ROWS)
        lengths = np.full(n_blocks, BLOCK_ROWS, dtype=np.int64)
        lengths[-1] = int(rows) - (n_blocks - 1) * BLOCK_ROWS

        def plan(lengths: Any = lengths) -> Any:
            return plan_within_budget(
                lengths, 16_384, 0, 256, 2**32, levels="auto", block_nbytes=2**26, storage="object"
            )

        start = time.perf_counter()
        drawn = plan()
        seconds = time.perf_counter() - start  # untraced: tracemalloc slows Python down
        peak = _traced(plan)[2]
        fanouts = " x ".join(map(str, getattr(drawn, "fanouts", []))) or "-"
        print(
            f"| {rows:.0e} | {n_blocks:,} | {getattr(drawn, 'n_levels', 1)} | {fanouts} | {seconds:.2f} s "
            f"| {format_size(peak)} |"
        )
    print("\n| blocks x piles | make_plan s | peak memory |")
    print("|---|---:|---:|")
    for n_blocks in args.plans:
        for n_piles in (512, 4_096):
            tracemalloc.start()
            start = time.perf_counter()
            plan = make_plan([65_536] * n_blocks, n_piles, seed=0)
            _ = plan.piece_offsets
            seconds = time.perf_counter() - start
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(f"| {n_blocks:,} x {n_piles:,} | {seconds:.2f} | {format_size(peak)} |")
    if args.graph_blocks:
        _graph_size(args.graph_blocks, 16_384)


if __name__ == "__main__":
    main()
