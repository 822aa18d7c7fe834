"""Shuffling text lines through a model of S3 (benchmarks/_s3_model.py), against local disk and the model's ceiling.

Writes a JSONL file of ``--size`` (and a gzip copy of it) on local disk and in a
bucket of the model, then, interleaved for ``--repeat`` rounds, one table of
medians on dask's threaded scheduler:

- ``cat model``: the source requested once through the model, in 8 MiB ranges
  all at once (the ceiling of the model for these bytes);
- ``lines local``: ``shuffle_lines`` local -> local;
- ``lines model``: S3 -> S3 through the model, with the requests it made;
- ``lines model, gzip``: the gzip source, S3 -> S3 (one stream: read in one task).

Run it with another checkout first on ``PYTHONPATH`` to compare versions:

    PYTHONPATH=/path/to/other python benchmarks/bench_lines_model.py --size 64MiB
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
from _s3_model import S3ModelFileSystem
from dask.utils import format_bytes, parse_bytes
from fsspec.asyn import sync

import daskshuffle

BUCKET = "bench"
RANGE_NBYTES = 8 * 2**20


def make_lines(path: Path, nbytes: int) -> int:
    """JSONL records of about 100 bytes until ``nbytes``; the number of lines."""
    n_lines = 0
    with path.open("w") as file:
        written = 0
        while written < nbytes:
            line = f'{{"id": {n_lines}, "text": "{"abcdefghij" * (n_lines % 13)}"}}\n'
            file.write(line)
            written += len(line)
            n_lines += 1
    return n_lines


def cat_model(fs: S3ModelFileSystem, path: str, size: int) -> int:
    """Every 8 MiB range of ``path`` requested at once on the filesystem's event loop."""

    async def fetch_all() -> int:
        async def one(start: int) -> int:
            return len(await fs._cat_file(path, start=start, end=min(start + RANGE_NBYTES, size)))

        return sum(await asyncio.gather(*(one(start) for start in range(0, size, RANGE_NBYTES))))

    total: int = sync(fs.loop, fetch_all)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="64MiB", help="Source size (default 64MiB).")
    parser.add_argument("--repeat", type=int, default=3, help="Rounds (default 3); medians are reported.")
    parser.add_argument("--latency", type=float, default=0.02, help="Seconds to the first byte (default 0.02).")
    parser.add_argument("--bandwidth", default="100MB", help="Per request, per second (default 100MB).")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lines-model-"))
    try:
        objects = work / "objects" / BUCKET
        objects.mkdir(parents=True)
        n_lines = make_lines(work / "in.jsonl", parse_bytes(args.size))
        with (work / "in.jsonl").open("rb") as plain, gzip.open(work / "in.jsonl.gz", "wb", compresslevel=1) as packed:
            shutil.copyfileobj(plain, packed)
        for name in ("in.jsonl", "in.jsonl.gz"):
            shutil.copy(work / name, objects / name)
        size = (work / "in.jsonl").stat().st_size
        options: dict[str, Any] = {
            "root": str(work / "objects"),
            "latency": args.latency,
            "bandwidth": float(parse_bytes(args.bandwidth)),
        }
        fs = S3ModelFileSystem(**options)
        model = f"s3model://{BUCKET}"

        def lines(src: str, dst: str, storage_options: dict[str, Any] | None) -> None:
            daskshuffle.shuffle_lines(src, dst, seed=1, overwrite=True, storage_options=storage_options)

        table: dict[str, Callable[[], Any]] = {
            "cat model": lambda: cat_model(fs, f"{BUCKET}/in.jsonl", size),
            "lines local": lambda: lines(str(work / "in.jsonl"), str(work / "out.jsonl"), None),
            "lines model": lambda: lines(f"{model}/in.jsonl", f"{model}/out.jsonl", options),
            "lines model, gzip": lambda: lines(f"{model}/in.jsonl.gz", f"{model}/out-gz.jsonl", options),
        }
        times: dict[str, list[float]] = {name: [] for name in table}
        requests: dict[str, dict[str, int]] = {}
        with dask.config.set(scheduler="threads"):
            for _ in range(args.repeat):
                for name, run in table.items():
                    fs.reset_stats()
                    began = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - began)
                    requests[name] = {kind: n for kind, n in fs.stats()["requests"].items() if n}
        print(
            f"{n_lines:,} lines ({format_bytes(size)}), {args.repeat} rounds, medians, daskshuffle from "
            f"{Path(daskshuffle.__file__).parent.parent}"
        )
        ceiling = statistics.median(times["cat model"])
        print(f"{'':<20} {'median s':>9} {'best s':>7} {'MB/s':>7} {'x cat model':>12}  requests")
        for name, found in times.items():
            median = statistics.median(found)
            counts = ", ".join(f"{kind} {n}" for kind, n in requests.get(name, {}).items())
            print(
                f"{name:<20} {median:9.2f} {min(found):7.2f} {size / median / 1e6:7.1f} {median / ceiling:12.2f}  "
                f"{counts}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
