"""Benchmark object storage against local disk, and the cost of ``verify``.

A small Zarr source (``x`` (N, 64) float32 and ``id`` (N,) int64, 1 MiB
chunks) on local disk and in a bucket of a loopback S3 server (moto's server,
started by this script in its own process on 127.0.0.1), then, interleaved for
``--repeat`` rounds on dask's threaded scheduler:

- ``read local`` / ``read s3``: every file of the source read once (the ceiling
  of each storage for these bytes, through fsspec);
- ``shuffle local``: ``shuffle_zarr`` local -> local;
- ``shuffle s3``: S3 -> S3 (pieces on S3 too);
- ``shuffle s3, tmp local``: S3 -> S3 with ``tmp=`` on local disk;
- ``loader local`` / ``loader s3``: one ``PileLoader`` epoch of the pile store;
- ``verify local`` / ``verify s3``: ``daskshuffle.verify`` of the pile store
  against its source, and its time relative to the shuffle on the same storage.

Loopback S3 measures the cost of the S3 protocol and of s3fs (HTTP requests,
signing, no rename), not a network: moto keeps objects in memory and answers
from one Python process. Run ``python benchmarks/bench_s3.py --help``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from dask.utils import format_bytes, parse_bytes

import daskshuffle

WIDTH = 64
ROW_NBYTES = WIDTH * 4 + 8
CHUNK_ROWS = 4_096  # 1 MiB chunks of x


def make_source(path: Path, n_rows: int) -> None:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    rng = np.random.default_rng(0)
    x = group.create_array("x", shape=(n_rows, WIDTH), chunks=(CHUNK_ROWS, WIDTH), dtype="f4")
    ids = group.create_array("id", shape=(n_rows,), chunks=(CHUNK_ROWS,), dtype="i8")
    step = CHUNK_ROWS * 16
    for start in range(0, n_rows, step):
        stop = min(start + step, n_rows)
        block = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
        block[:, 0] = np.arange(start, stop)
        x[start:stop] = block
        ids[start:stop] = np.arange(start, stop)


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
            return server, endpoint
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise RuntimeError("moto's server did not start")


def read_all(fs: Any, root: str) -> int:
    files = list(fs.find(root))
    return sum(len(data) for data in fs.cat(files).values())


def epoch(store: str, storage_options: dict[str, Any] | None) -> int:
    rows = 0
    with daskshuffle.PileLoader(store, batch_size=1024, seed=0, storage_options=storage_options) as loader:
        for batch in loader:
            rows += len(batch["id"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="64MiB", help="Source size (default 64MiB).")
    parser.add_argument("--repeat", type=int, default=3, help="Rounds (default 3); medians are reported.")
    parser.add_argument("--n-piles", type=int, default=16)
    args = parser.parse_args()
    n_rows = parse_bytes(args.size) // ROW_NBYTES

    import s3fs

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    server, endpoint = start_server()
    options = {"key": "bench", "secret": "bench", "client_kwargs": {"endpoint_url": endpoint}}
    work = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    try:
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("bench")
        make_source(work / "raw.zarr", n_rows)
        fs.put(str(work / "raw.zarr"), "bench/raw.zarr", recursive=True)
        nbytes = sum(path.stat().st_size for path in (work / "raw.zarr").rglob("*") if path.is_file())
        import fsspec

        lfs = fsspec.filesystem("file")
        scratch = work / "scratch"
        scratch.mkdir()
        common = {"seed": 0, "overwrite": True, "block_memory": "8MiB"}

        def run(name: str) -> Callable[[], Any]:
            table: dict[str, Callable[[], Any]] = {
                "read local": lambda: read_all(lfs, str(work / "raw.zarr")),
                "read s3": lambda: read_all(fs, "bench/raw.zarr"),
                "shuffle local": lambda: daskshuffle.shuffle_zarr(
                    str(work / "raw.zarr"), str(work / "piles.zarr"), args.n_piles, **common
                ),
                "shuffle s3": lambda: daskshuffle.shuffle_zarr(
                    "s3://bench/raw.zarr", "s3://bench/piles.zarr", args.n_piles, storage_options=options, **common
                ),
                "shuffle s3, tmp local": lambda: daskshuffle.shuffle_zarr(
                    "s3://bench/raw.zarr",
                    "s3://bench/piles-tmp.zarr",
                    args.n_piles,
                    tmp=str(scratch),
                    storage_options=options,
                    **common,
                ),
                "loader local": lambda: epoch(str(work / "piles.zarr"), None),
                "loader s3": lambda: epoch("s3://bench/piles.zarr", options),
                "verify local": lambda: daskshuffle.verify(str(work / "piles.zarr")),
                "verify s3": lambda: daskshuffle.verify("s3://bench/piles.zarr", storage_options=options),
            }
            return table[name]

        names = [
            "read local",
            "read s3",
            "shuffle local",
            "shuffle s3",
            "shuffle s3, tmp local",
            "loader local",
            "loader s3",
            "verify local",
            "verify s3",
        ]
        times: dict[str, list[float]] = {name: [] for name in names}
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            for name in names:
                began = time.perf_counter()
                run(name)()
                times[name].append(time.perf_counter() - began)
        load_after = os.getloadavg()[0]
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"source: {n_rows:,} rows, {format_bytes(nbytes)} on disk; {args.n_piles} piles; {args.repeat} rounds")
        print(f"load average (1 min): {load_before:.2f} before, {load_after:.2f} after")
        print(f"{'':24} {'median s':>9} {'best s':>8} {'MB/s':>8}  ratio")
        pairs = {
            "read s3": "read local",
            "shuffle s3": "shuffle local",
            "shuffle s3, tmp local": "shuffle local",
            "loader s3": "loader local",
            "verify local": "shuffle local",
            "verify s3": "shuffle s3",
        }
        for name in names:
            ratio = f"{median[name] / median[pairs[name]]:.2f}x {pairs[name]}" if name in pairs else ""
            speed = nbytes / median[name] / 1e6
            print(f"{name:24} {median[name]:9.2f} {min(times[name]):8.2f} {speed:8.0f}  {ratio}")
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
