"""Rows/s and cross-epoch independence of ``PileLoader``'s default against one pile at a time, side by side.

On the pile store of ``bench_loader.py`` (``x`` (N, 64) float32 and ``id``,
``--size`` bytes in ``--n-piles`` piles, made on first use), in one process,
page cache warm: for ``piles_in_memory`` at its default (``"auto"``: as many
piles as 64 MiB holds, up to ``ceil(sqrt(2 n_piles))``) and at 1, the rows/s of
whole epochs (``x`` and ``id``, nothing done with the batches; contenders
interleaved for ``--repeat`` rounds, median and best) and the co-batch overlap
of epoch 1 after epoch 0 over what independent shuffles give, with what
:func:`~daskshuffle.plan._epoch_plan.cobatch_excess` predicts; and, as the
ceiling, a plain read of every file of the store in the same rounds.

Run ``python benchmarks/bench_epochs_independence.py --help``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
from bench_loader import open_or_make
from dask.utils import parse_bytes

import daskshuffle
from daskshuffle.orders import Piles
from daskshuffle.plan._epoch_plan import cobatch_excess
from daskshuffle.quality._metrics import cobatch_overlap


def epoch_rows_per_second(store: str, batch_size: int, piles_in_memory: int | str, epoch: int) -> float:
    with daskshuffle.PileLoader(store, batch_size, seed=0, order=Piles(piles_in_memory=piles_in_memory)) as loader:
        loader.set_epoch(epoch)
        start = time.perf_counter()
        n_rows = sum(len(batch["id"]) for batch in loader)
        return n_rows / (time.perf_counter() - start)


def plain_read_rows_per_second(store: str, n_rows: int) -> float:
    """The ceiling for the same work: every file of the store read once, in one thread, in stored order."""
    files = sorted(path for path in Path(store).rglob("*") if path.is_file())
    start = time.perf_counter()
    for path in files:
        path.read_bytes()
    return n_rows / (time.perf_counter() - start)


def epoch_ids(store: str, batch_size: int, piles_in_memory: int | str, epoch: int) -> np.ndarray:
    with daskshuffle.PileLoader(
        store, batch_size, seed=0, order=Piles(piles_in_memory=piles_in_memory), variables=["id"]
    ) as loader:
        loader.set_epoch(epoch)
        return np.concatenate([batch["id"] for batch in loader])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="256MiB", help="bytes of data (default 256MiB)")
    parser.add_argument("--n-piles", type=int, default=128, help="piles (default 128: 2 MiB each at 256 MiB)")
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data", help="where the data goes")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5, help="rounds of both contenders, interleaved")
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    _, store = open_or_make(args.data, parse_bytes(args.size), args.n_piles, "x")
    with daskshuffle.PileLoader(store, args.batch_size, seed=0) as loader:
        k = loader.settings.piles_in_memory
        n_rows = loader.n_rows
        pile_nbytes = int(np.diff(loader._piles.offsets).max()) * (64 * 4 + 8)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.n_piles} piles of up to {pile_nbytes / 2**20:.2f} MiB")
    contenders: dict[str, int | str] = {f"default (auto: {k} piles)": "auto", "piles_in_memory=1": 1}
    speeds: dict[str, list[float]] = {name: [] for name in contenders}
    plain: list[float] = []
    for round_ in range(args.repeat):
        for name, value in contenders.items():
            speeds[name].append(epoch_rows_per_second(store, args.batch_size, value, epoch=round_ + 1))
        plain.append(plain_read_rows_per_second(store, n_rows))
    print("\n| piles_in_memory | held (MiB) | rows/s median (best) | co-batch overlap | x independent | predicted |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for (name, value), held in zip(contenders.items(), (k, 1), strict=True):
        first, second = (epoch_ids(store, args.batch_size, value, epoch) for epoch in (0, 1))
        measure = cobatch_overlap(first, second, args.batch_size)
        median, best = statistics.median(speeds[name]), max(speeds[name])
        print(
            f"| {name} | {held * pile_nbytes / 2**20:.0f} | {median:,.0f} ({best:,.0f}) | {measure.value:.5f} | "
            f"{measure.value / measure.uniform:.2f}x | {cobatch_excess(args.n_piles, held):.2f}x |"
        )
    print(
        f"| plain read of the store's files (the ceiling) | - | {statistics.median(plain):,.0f} "
        f"({max(plain):,.0f}) | - | - | - |"
    )
    print(f"\nload average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
