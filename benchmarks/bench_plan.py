"""The scale model's table from 1 GiB to 100 TiB, and what drawing a plan costs the client.

    python benchmarks/bench_plan.py

First, ``daskshuffle.explain`` for 1 KiB rows at 1 GiB, 100 GiB, 1 TiB, 10 TiB and
100 TiB with the defaults (512 piles or as many as 256 MiB piles need, 64 MiB
blocks, pieces on object storage, 100 tasks at a time): levels, tasks, reads
and their size, the plan on the client and the request latency of the reads.
Then ``_plan.make_plan`` timed, with its peak memory (``tracemalloc``), for
growing numbers of blocks and piles: the client's cost today.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import daskshuffle
from daskshuffle._plan import make_plan
from daskshuffle._scale import _duration, _size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=100, help="tasks at a time, for the latency (default 100)")
    parser.add_argument("--plans", type=int, nargs="*", default=[1_000, 4_000, 16_000], help="blocks to plan")
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
        m = daskshuffle.explain(size // 1024, 1024, workers=args.workers)
        second = f"{m.n_first_reads:,} of {_size(m.first_read_nbytes)}" if m.levels > 1 else "-"
        fast, slow = (m.latency_seconds(latency) for latency in (0.010, 0.050))
        print(
            f"| {label} | {m.levels} | {m.n_piles:,} | {m.n_blocks:,} | {m.n_groups:,} | {second} | "
            f"{m.n_reads:,} of {_size(m.read_nbytes)} | {_size(m.plan_nbytes)} | {_duration(fast)} to {_duration(slow)} |"
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
            print(f"| {n_blocks:,} x {n_piles:,} | {seconds:.2f} | {_size(peak)} |")


if __name__ == "__main__":
    main()
