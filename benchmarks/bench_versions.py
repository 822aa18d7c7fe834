"""Benchmark two checkouts of daskshuffle against each other: the shuffle's wall time and the loader's rows/s.

Each round runs every checkout in a process of its own (``PYTHONPATH`` set to
the checkout), one after the other, so that the checkouts of a round share the
machine's load; the order turns round by round (A B, then B A), and each run
starts after ``sync``, so that no checkout pays for writing back what the one
before it wrote: ``shuffle_zarr`` of one Zarr source of ``x`` (N, 64) float32 and
``id`` (N,) int64 into 512 piles on the threaded scheduler (its wall time), then
``PileLoader`` at its defaults over the store it wrote (rows/s of the best of
two epochs after a first one), and ``cat`` of the store's chunk files (the
ceiling, rows/s). The table gives each figure's median over the rounds and the
ratio of each checkout to the first. Run::

    git worktree add /tmp/before <commit>
    python benchmarks/bench_versions.py --size 1GiB --rounds 3 /tmp/before .
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import zarr

ROW_NBYTES = 64 * 4 + 8
CHILD = """
import json, os, shutil, subprocess, sys, time
import daskshuffle as ds
src, dst = sys.argv[1], sys.argv[2]
shutil.rmtree(dst, ignore_errors=True)
os.sync()
began = time.perf_counter()
result = ds.shuffle_zarr(src, dst, n_piles=512, seed=0)
shuffle_s = time.perf_counter() - began
files = [os.path.join(root, name) for root, _, names in os.walk(dst) for name in names if "/c/" in os.path.join(root, name)]
began = time.perf_counter()
subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
cat_s = time.perf_counter() - began
loader = ds.PileLoader(dst, batch_size=1024)
times = []
for _ in range(3):
    began = time.perf_counter()
    n = sum(len(batch["id"]) for batch in loader)
    times.append(time.perf_counter() - began)
loader.close()
print(json.dumps({"rows": n, "shuffle_s": shuffle_s, "loader_rows_s": n / min(times[1:]), "cat_rows_s": n / cat_s}))
"""


def make_source(path: Path, n_rows: int) -> None:
    if path.exists():
        return
    group = zarr.open_group(path, mode="w")
    rng = np.random.default_rng(0)
    chunk = 262_144
    x = group.create_array("x", shape=(n_rows, 64), dtype="float32", chunks=(chunk, 64), compressors=None)
    ids = group.create_array("id", shape=(n_rows,), dtype="int64", chunks=(chunk,), compressors=None)
    for start in range(0, n_rows, chunk):
        stop = min(start + chunk, n_rows)
        x[start:stop] = rng.standard_normal((stop - start, 64), dtype="float32")
        ids[start:stop] = np.arange(start, stop)


def run(checkout: Path, src: Path, dst: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(src), str(dst)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", type=Path, help="the first is the baseline")
    parser.add_argument("--size", default="1GiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path("benchmarks/data/versions"))
    args = parser.parse_args()
    from dask.utils import parse_bytes

    n_rows = parse_bytes(args.size) // ROW_NBYTES
    args.data.mkdir(parents=True, exist_ok=True)
    src = args.data / f"src-{n_rows}.zarr"
    make_source(src, n_rows)
    found: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(args.checkouts))}
    load = os.getloadavg()[0]
    for round_ in range(args.rounds):
        order = list(enumerate(args.checkouts))
        for index, checkout in order if round_ % 2 == 0 else order[::-1]:
            figures = run(checkout, src, args.data / f"piles-{index}.zarr")
            assert figures["rows"] == n_rows, figures
            found[index].append(figures)
            print(f"round {round_ + 1}, {checkout}: {figures}", flush=True)
    print(f"\n{n_rows:,} rows ({args.size}), {args.rounds} rounds, load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; medians")  # fmt: skip
    print("| checkout | shuffle s | x first | loader rows/s | x first | of cat |\n|---|---:|---:|---:|---:|---:|")
    base = {key: statistics.median(f[key] for f in found[0]) for key in found[0][0]}
    for index, checkout in enumerate(args.checkouts):
        med = {key: statistics.median(f[key] for f in found[index]) for key in found[index][0]}
        print(
            f"| {checkout} | {med['shuffle_s']:.2f} | {med['shuffle_s'] / base['shuffle_s']:.3f} "
            f"| {med['loader_rows_s'] / 1e6:.2f}M | {med['loader_rows_s'] / base['loader_rows_s']:.3f} "
            f"| {med['loader_rows_s'] / med['cat_rows_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
