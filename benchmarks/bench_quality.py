"""Shuffle quality of every reference order at equal memory, and what ``quality.report`` costs.

For ``--rows`` rows and a memory budget of ``--memory`` rows (what a loader may
hold at once), this makes each reference order of :mod:`daskshuffle.quality.orders`
(no shuffle; a shuffle buffer of the budget; 16 files interleaved 4 at a time
into a buffer of the budget; shards of the budget shuffled one at a time; piles
of the budget read by ``PileLoader``, epochs 0 and 1; a uniform shuffle, which
needs all rows in memory), measures each with ``quality.report`` (batch
``--batch-size``, blocks of ``--block-size`` rows), prints the table of values
with each verdict, and draws ``--png`` (the Hilbert pictures and heat maps).
Then, for ``PileLoader(piles_in_memory=k)`` with ``k`` = 1, 2, 4, 8, 16, the
share of batch-mates that meet again in the next epoch. Then it times ``report`` on uniform orders of ``--time`` sizes and gives its
peak memory (``tracemalloc``) against the order's own size.

    python benchmarks/bench_quality.py --png docs/images/quality-orders.png

Run ``python benchmarks/bench_quality.py --help``.
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np

from daskshuffle import quality
from daskshuffle.quality import orders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--memory", type=int, default=10_000, help="rows a loader may hold (default 10,000: 1%%)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--block-size", type=int, default=10_000, help="rows of a source file or chunk")
    parser.add_argument("--png", default=None, help="where to draw the orders")
    parser.add_argument("--time", type=float, nargs="*", default=[1e7, 1e8], help="sizes to time report at")
    args = parser.parse_args()

    n, budget = args.rows, args.memory
    n_piles = max(1, n // budget)
    made = {
        "no shuffle": orders.identity(n),
        f"buffer {budget:,}": orders.shuffle_buffer(n, budget),
        f"interleave 4 of 16 files, buffer {budget:,}": orders.interleave(n, 16, 4, budget),
        f"shards of {budget:,}": orders.shard_local(n, budget),
        f"piles of {budget:,}, epoch 0": orders.piles(n, n_piles, seed=0, epoch=0),
        f"piles of {budget:,}, epoch 1": orders.piles(n, n_piles, seed=0, epoch=1),
        "uniform (all rows in memory)": orders.uniform(n),
    }
    previous = made[f"piles of {budget:,}, epoch 0"]
    tables = {}
    for name, order in made.items():
        follows = previous if name.endswith("epoch 1") else orders.uniform(n, seed=7) if "uniform" in name else None
        tables[name] = quality.report(
            order, batch_size=args.batch_size, block_size=args.block_size, n_piles=n_piles, previous=follows
        )
    first = next(iter(tables.values()))
    columns = [f"{row.metric} ({row.scale})" for row in first.itertuples()] + ["co-batch overlap"]
    print(f"{n:,} rows, memory of {budget:,} rows, batch {args.batch_size}, blocks of {args.block_size:,} rows\n")
    print("| order | " + " | ".join(columns) + " | as uniform |")
    print("|---|" + "---:|" * (len(columns) + 1))
    for name, table in tables.items():
        values = {f"{row.metric} ({row.scale})": row for row in table.itertuples()}
        cells = []
        for column in columns:
            row = values.get(column) or next((r for k, r in values.items() if k.startswith(column)), None)
            cells.append("-" if row is None else f"{row.value:.3g}{'' if row.verdict == 'as uniform' else ' ✗'}")
        uniform = int((table["verdict"] == "as uniform").sum())
        print(f"| {name} | " + " | ".join(cells) + f" | {uniform} of {len(table)} |")
    expected = first.set_index(["metric", "scale"])["uniform"]
    print("\nuniform expects: " + ", ".join(f"{m} ({s}) {v:.3g}" for (m, s), v in expected.items()))
    if args.png:
        os.makedirs(os.path.dirname(args.png) or ".", exist_ok=True)
        pictured = {name.split(",")[0].split(" (")[0]: order for name, order in made.items() if "epoch 1" not in name}
        quality.plot_orders(pictured, args.png)
        print(f"drew {args.png}")

    print(
        "\n| piles_in_memory | memory (rows) | co-batch overlap | x independent epochs | as uniform within the epoch |"
    )
    print("|---:|---:|---:|---:|---:|")
    for k in (1, 2, 4, 8, 16):
        first = orders.piles(n, n_piles, seed=0, epoch=0, piles_in_memory=k)
        second = orders.piles(n, n_piles, seed=0, epoch=1, piles_in_memory=k)
        table = quality.report(second, batch_size=args.batch_size, n_piles=n_piles, previous=first)
        row = table.set_index("metric").loc["co-batch overlap"]
        within = int((table[table["metric"] != "co-batch overlap"]["verdict"] == "as uniform").sum())
        print(
            f"| {k} | {k * budget:,} | {row['value']:.4f} | {row['value'] / row['uniform']:.1f} | "
            f"{within} of {len(table) - 1} |"
        )

    print("\n| rows | report s | peak memory | x the order's bytes |")
    print("|---:|---:|---:|---:|")
    for size in (int(s) for s in args.time):
        order = np.random.default_rng(0).permutation(size)
        tracemalloc.start()
        start = time.perf_counter()
        quality.report(order, batch_size=args.batch_size, block_size=args.block_size)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"| {size:,} | {seconds:.1f} | {peak / 2**20:,.0f} MiB | {peak / order.nbytes:.1f} |")


if __name__ == "__main__":
    main()
