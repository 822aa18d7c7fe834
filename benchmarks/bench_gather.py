"""Ways to hand out a group of rows in a uniform order, in numpy, against copying the same bytes.

The default loader of a store whose piles are stored shuffled holds a group
of units (64 MiB by default) and hands its rows out in batches, in one uniform
permutation of the group. This measures, on rows of ``x`` float32[64] + ``id``
int64 (264 bytes), in one process, the best of ``--repeat`` runs of each:

- ``group: permutation + gather``: what the loader does, a permutation of the
  group and a gather of each batch from the group in memory;
- ``pile in cache: permutation + gather``: the same for the rows of a 4 MiB pile
  at a time, read just before (one pile at a time), in the cache;
- ``units shuffled in place, interleaved``: the other uniform order: each unit
  shuffled in place, then the units interleaved by a uniform sequence of labels
  and each batch gathered from runs of the units;
- ``scatter into place``: the group's rows written to their places in the
  order (``numpy.put``) rather than gathered;
- ``memcpy``, ``batches copied in order``: the ceilings, the same bytes copied.

Run ``python benchmarks/bench_gather.py --group-mib 64 --unit-rows 4096``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

ROW_NBYTES = 64 * 4 + 8
BATCH = 1024


def best(run: Callable[[], object], repeat: int) -> float:
    seconds = []
    for _ in range(repeat):
        began = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - began)
    return min(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--group-mib", type=int, default=64)
    parser.add_argument("--pile-mib", type=int, default=4)
    parser.add_argument("--unit-rows", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.group_mib * 2**20 // ROW_NBYTES // BATCH * BATCH
    x = rng.standard_normal((n, 64), dtype=np.float32)
    ids = np.arange(n)
    pile = args.pile_mib * 2**20 // ROW_NBYTES
    units = np.arange(0, n, args.unit_rows)
    sizes = np.diff(np.append(units, n))

    def group() -> None:
        order = rng.permutation(n)
        for start in range(0, n, BATCH):
            index = order[start : start + BATCH]
            x.take(index, axis=0)
            ids.take(index)

    rows, names = x[:pile].copy(), ids[:pile].copy()  # a pile just read, in the cache

    def pile_in_cache() -> None:
        for _ in range(0, n, pile):
            order = rng.permutation(len(rows))
            for start in range(0, len(rows), BATCH):
                index = order[start : start + BATCH]
                rows.take(index, axis=0)
                names.take(index)

    def interleaved() -> None:
        for first, size in zip(units.tolist(), sizes.tolist(), strict=True):
            order = rng.permutation(size)
            x[first : first + size] = x[first : first + size].take(order, axis=0)
            ids[first : first + size] = ids[first : first + size].take(order)
        labels = rng.permutation(np.repeat(np.arange(len(sizes), dtype=np.int16), sizes))
        places = np.empty(n, dtype=np.intp)
        places[np.argsort(labels, kind="stable")] = np.arange(n)
        for start in range(0, n, BATCH):
            index = places[start : start + BATCH]
            x.take(index, axis=0)
            ids.take(index)

    out, out_ids = np.empty_like(x), np.empty_like(ids)
    out[:], out_ids[:] = 0, 0
    rows_as_bytes = np.dtype((np.void, 64 * 4))

    def scatter() -> None:
        order = rng.permutation(n)
        for first in range(0, n, pile):
            places = order[first : first + pile]
            np.put(out.view(rows_as_bytes).ravel(), places, x[first : first + len(places)].view(rows_as_bytes))
            np.put(out_ids, places, ids[first : first + len(places)])

    def memcpy() -> None:
        np.copyto(out, x)
        np.copyto(out_ids, ids)

    def batches_in_order() -> None:
        for start in range(0, n, BATCH):
            x[start : start + BATCH].copy()
            ids[start : start + BATCH].copy()

    table = {
        "group: permutation + gather": group,
        f"pile in cache ({args.pile_mib} MiB): permutation + gather": pile_in_cache,
        "units shuffled in place, interleaved": interleaved,
        "scatter into place": scatter,
        "memcpy": memcpy,
        "batches copied in order": batches_in_order,
    }
    print(
        f"{n:,} rows of {ROW_NBYTES} bytes ({args.group_mib} MiB), units of {args.unit_rows:,} rows, best of {args.repeat}"
    )
    print("| way | ms | rows/s | of memcpy |")
    print("|---|---:|---:|---:|")
    seconds = {name: best(run, args.repeat) for name, run in table.items()}
    for name, took in seconds.items():
        print(f"| {name} | {took * 1e3:.1f} | {n / took / 1e6:.1f}M | {seconds['memcpy'] / took:.2f} |")


if __name__ == "__main__":
    main()
