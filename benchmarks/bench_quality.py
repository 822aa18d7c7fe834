"""Shuffle quality of every reference order at equal memory, and what ``quality.report`` costs.

For ``--rows`` rows and a memory budget of ``--memory`` rows (what a loader may
hold at once), this makes each reference order of :mod:`daskshuffle.quality.orders`
(no shuffle; a shuffle buffer of the budget; 16 files interleaved 4 at a time
into a buffer of the budget; shards of the budget shuffled one at a time; a
pile store in piles of the budget read by ``PileLoader(order=Piles(budget=...))``
with the budget (two groups of units of ``--unit-rows`` rows), epochs 0 and 1; a
uniform shuffle, which needs all rows in memory), measures each with
``quality.report`` (batch ``--batch-size``, blocks of ``--block-size`` rows),
prints the table of values with each verdict, and draws ``--png`` (the Hilbert
pictures and heat maps). Then, for budgets of 1, 2, 4, 8 and 16 times that, the
share of batch-mates that meet again in the next epoch, against the prediction
(``plan.unit_excess``). Then every order of ``PileLoader(order=...)`` over one
pile store (piles of a quarter of the budget), each given the budget per read: epoch 1 after epoch 0,
with the rows each read holds and how often each row is read in an epoch
(``--orders-only`` prints that table alone). Then it times ``report`` on uniform
orders of ``--time`` sizes and gives its peak memory (``tracemalloc``) against
the order's own size.

    python benchmarks/bench_quality.py --png docs/images/quality-orders.png

Run ``python benchmarks/bench_quality.py --help``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
import tracemalloc

import numpy as np

from daskshuffle import quality
from daskshuffle.epochs._order_classes import ORDER_CLASSES
from daskshuffle.epochs._orders import ORDERS, READ_GAPS, division_cuts, unit_reads
from daskshuffle.epochs._unit_plan import unit_excess
from daskshuffle.orders import Piles
from daskshuffle.quality import orders


def loader_orders(n: int, budget: int, batch_size: int, unit_rows: int) -> None:
    """Every order of ``PileLoader(order=...)`` over piles of ``budget / 4`` rows, each holding about ``budget`` rows."""
    pile = max(1, budget // 4)
    n_piles = max(1, n // pile)
    made: dict[str, tuple[dict[str, int], str]] = {
        "piles": ({"budget": 2 * budget, "unit_rows": unit_rows}, "a group of units"),
        "naive": ({}, "all rows"),
        "py1s": ({}, "one pile"),
        "py2s": ({}, "one pile"),
        "py1b": ({"shuffle_block_size": budget}, "a block"),
        "py1br": ({"shuffle_block_size": int(budget / 1.25)}, "up to 1.25 blocks"),
        "py1e": ({"shuffle_block_size": budget // 2}, "about 2 blocks"),
        "buffer": ({"buffer_size": budget // 9}, "about 9 buffers"),
        "interleave": ({"buffer_size": budget // 9, "cycle_length": 4}, "about 9 buffers"),
    }
    print(
        f"\n{n:,} rows in {n_piles} piles of {pile:,}; each read holds about {budget:,} rows "
        f"(but py1s and py2s: a pile; naive: all); epoch 1 after epoch 0, batch {batch_size}\n"
    )
    print("| order | options | a read holds | largest read (rows) | reads per row | " + "measures | as uniform |")
    print("|---|---|---|---:|---:|---|---:|")
    for title, (options, holds) in made.items():
        name = title.split(",")[0]
        order = ORDER_CLASSES[name](**{key: value for key, value in options.items() if key != "unit_rows"})
        unit = options.get("unit_rows")
        first, second = (orders.piles(n, n_piles, seed=0, epoch=e, order=order, unit_rows=unit) for e in (0, 1))
        table = quality.report(second, batch_size=batch_size, n_piles=n_piles, previous=first)
        if name == "piles":  # a read is a group: half the budget, whole units
            largest, per_row = max(unit_rows, budget // unit_rows * unit_rows), 1.0
        else:
            offsets = np.linspace(0, n, n_piles + 1).astype(np.int64)  # the store's shape; pile sizes barely matter
            epoch_order = ORDERS[name](offsets, 0, 1, division_cuts(n, 1, n), order)
            sizes = [
                sum(b - a for a, b in unit_reads(epoch_order.rows[u:v], READ_GAPS[name])[0])
                for u, v in itertools.pairwise(epoch_order.bounds.tolist())
            ]
            largest, per_row = max(sizes), sum(sizes) / n
        failed = ", ".join(
            f"{row.metric} ({row.scale}) {row.value:.3g}" for row in table.itertuples() if row.verdict != "as uniform"
        )
        uniform = int((table["verdict"] == "as uniform").sum())
        shown = ", ".join(f"{key}={value:,}" for key, value in options.items()) or "-"
        print(
            f"| {name} | {shown} | {holds} | {largest:,} | {per_row:.2f} | {failed or 'all as uniform'} | "
            f"{uniform} of {len(table)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--memory", type=int, default=10_000, help="rows a loader may hold (default 10,000: 1%%)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--block-size", type=int, default=10_000, help="rows of a source file or chunk")
    parser.add_argument("--unit-rows", type=int, default=100, help="rows of a unit (a chunk) of the pile store")
    parser.add_argument("--png", default=None, help="where to draw the orders")
    parser.add_argument("--time", type=float, nargs="*", default=[1e7, 1e8], help="sizes to time report at")
    parser.add_argument("--orders-only", action="store_true", help="print the table of PileLoader's orders alone")
    args = parser.parse_args()

    n, budget, unit = args.rows, args.memory, args.unit_rows
    if args.orders_only:
        loader_orders(n, budget, args.batch_size, unit)
        return
    n_piles = max(1, n // budget)
    made = {
        "no shuffle": orders.identity(n),
        f"buffer {budget:,}": orders.shuffle_buffer(n, budget),
        f"interleave 4 of 16 files, buffer {budget:,}": orders.interleave(n, 16, 4, budget),
        f"shards of {budget:,}": orders.shard_local(n, budget),
        f"PileLoader, budget {budget:,}, epoch 0": orders.piles(
            n, n_piles, 0, 0, order=Piles(budget=budget), unit_rows=unit
        ),
        f"PileLoader, budget {budget:,}, epoch 1": orders.piles(
            n, n_piles, 0, 1, order=Piles(budget=budget), unit_rows=unit
        ),
        "uniform (all rows in memory)": orders.uniform(n),
    }
    previous = made[f"PileLoader, budget {budget:,}, epoch 0"]
    tables = {}
    for name, order in made.items():
        follows = previous if name.endswith("epoch 1") else orders.uniform(n, seed=7) if "uniform" in name else None
        tables[name] = quality.report(
            order, batch_size=args.batch_size, block_size=args.block_size, n_piles=n_piles, previous=follows
        )
    first = next(iter(tables.values()))
    columns = [f"{row.metric} ({row.scale})" for row in first.itertuples()] + ["co-batch overlap"]
    print(
        f"{n:,} rows, memory of {budget:,} rows, batch {args.batch_size}, blocks of {args.block_size:,} rows, "
        f"units of {unit:,} rows\n"
    )
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
        "\n| budget (rows) | units a group | co-batch overlap | x independent epochs | predicted | "
        "as uniform within the epoch |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for k in (1, 2, 4, 8, 16):
        first, second = (orders.piles(n, n_piles, 0, e, order=Piles(budget=k * budget), unit_rows=unit) for e in (0, 1))
        table = quality.report(second, batch_size=args.batch_size, n_piles=n_piles, previous=first)
        row = table.set_index("metric").loc["co-batch overlap"]
        within = int((table[table["metric"] != "co-batch overlap"]["verdict"] == "as uniform").sum())
        group = k * budget // 2
        print(
            f"| {k * budget:,} | {group // unit:,} | {row['value']:.4f} | {row['value'] / row['uniform']:.1f} | "
            f"{unit_excess(n, unit, group):.1f} | {within} of {len(table) - 1} |"
        )

    loader_orders(n, budget, args.batch_size, unit)

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
