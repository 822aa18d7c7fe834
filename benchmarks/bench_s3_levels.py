"""What ``levels="auto"`` chooses for pieces on object storage, against every number of levels, on the S3 model.

Shuffles a Zarr source of ``--size`` (``bench_s3.make_source``: ``x`` (N, 64)
float32 and ``id``) from a bucket of the model (``benchmarks/_s3_model.py``)
into it, with the pieces on the model too (``tmp=`` a URL of the model), at
``--block-memory`` and ``--n-piles`` chosen so that the merge's reads of pieces
are small, once with each of ``levels=1 .. --max-levels`` and once with
``levels="auto"``, interleaved for ``--repeat`` rounds. Prints the median
seconds and the requests of each, and the levels ``auto`` chose.

Run ``python benchmarks/bench_s3_levels.py --help``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _s3_model import S3ModelFileSystem
from bench_s3 import ROW_NBYTES, make_source
from dask.utils import parse_bytes

import daskshuffle
from daskshuffle.pilestore import read_metadata

BUCKET = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1GiB", help="Source size (default 1GiB).")
    parser.add_argument("--block-memory", default="8MiB", help="shuffle_zarr's block_memory (default 8MiB).")
    parser.add_argument("--n-piles", type=int, default=2048, help="Piles (default 2048).")
    parser.add_argument("--max-levels", type=int, default=3, help="Levels tried, from 1 (default 3).")
    parser.add_argument("--repeat", type=int, default=2, help="Rounds (default 2); medians are reported.")
    parser.add_argument("--latency", type=float, default=0.02, help="Seconds to the first byte (default 0.02).")
    parser.add_argument("--dir", default=None, help="Working directory (default a temporary one, removed).")
    args = parser.parse_args()

    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-s3-levels-"))
    work.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {"root": str(work / "objects"), "latency": args.latency, "bandwidth": 100e6}
    fs = S3ModelFileSystem(**options)
    try:
        source = work / "objects" / BUCKET / f"raw-{args.size}.zarr"
        if not source.exists():
            make_source(source, parse_bytes(args.size) // ROW_NBYTES)
        url = f"s3model://{BUCKET}/{source.name}"
        runs: dict[str, Any] = {str(levels): levels for levels in range(1, args.max_levels + 1)} | {"auto": "auto"}
        times: dict[str, list[float]] = {name: [] for name in runs}
        requests: dict[str, int] = {}
        chosen = None
        for _ in range(args.repeat):
            for name, levels in runs.items():
                shutil.rmtree(work / "objects" / BUCKET / "piles.zarr", ignore_errors=True)
                fs.reset_stats()
                began = time.perf_counter()
                result = daskshuffle.shuffle_zarr(
                    url,
                    f"s3model://{BUCKET}/piles.zarr",
                    args.n_piles,
                    seed=0,
                    block_memory=args.block_memory,
                    levels=levels,
                    tmp=f"s3model://{BUCKET}/scratch",
                    storage_options=options,
                )
                times[name].append(time.perf_counter() - began)
                requests[name] = sum(fs.stats()["requests"].values())
                if name == "auto":
                    metadata = read_metadata(f"s3model://{BUCKET}/piles.zarr", options) or {}
                    chosen = metadata.get("levels", {}).get("n_levels", 1)
                del result
        print(
            f"{args.size}, block_memory={args.block_memory}, n_piles={args.n_piles}, pieces on the model "
            f"(latency {args.latency * 1e3:.0f} ms, 100 MB/s a request); {args.repeat} rounds"
        )
        for name in runs:
            print(f"levels={name:5} {statistics.median(times[name]):7.2f} s  {requests[name]:>8,} requests")
        print(f"levels='auto' chose {chosen} levels")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
