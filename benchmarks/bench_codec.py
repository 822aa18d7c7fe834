"""Benchmark the pile store's automatic codec on image-like and token data: size on disk and the loader's rows/s.

Two sources, made here: uint8 images (N, 32, 32, 3) of smooth gradients and
waves plus pixel noise (``--contrast``, ``--noise``), and int32 token ids drawn
from a Zipf distribution over a 50,257-word vocabulary. Each is shuffled into
16 piles three ways: stored raw (``compressors=None``), with the automatic
codec (``compressors="auto"``), and with blosc-zstd. For each store: its size
on disk, ``cat`` of its chunk files (rows/s, the ceiling of a raw store) and
``PileLoader`` at its defaults (the median rows/s of ``--repeat`` epochs, the
stores taking turns). Run ``python benchmarks/bench_codec.py --rows 64000``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import dask
import numpy as np
import zarr
from zarr.codecs import BloscCodec

import daskshuffle as ds


def images(n: int, *, contrast: float, noise: float, seed: int = 0, side: int = 32) -> np.ndarray:
    """uint8 (n, side, side, 3) images: smooth gradients and waves of ``contrast``, plus pixel ``noise``."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side] / side
    a = rng.uniform(-1, 1, (n, 4, 1, 1))
    field = a[:, 0] * xx + a[:, 1] * yy + a[:, 2] * np.sin(2 * np.pi * (xx + yy + a[:, 3]))
    base = rng.normal(110, 8, (n, 1, 1, 1)) + contrast * field[..., None]
    return np.clip(base + rng.normal(0, noise, (n, side, side, 3)), 0, 255).astype(np.uint8)


def tokens(n: int, *, length: int = 256, seed: int = 0) -> np.ndarray:
    """int32 (n, length) token ids, Zipf-distributed over a 50,257-word vocabulary."""
    drawn = np.random.default_rng(seed).zipf(1.2, (n, length))
    return (np.minimum(drawn, 50_257) - 1).astype(np.int32)


def nbytes_on_disk(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64_000)
    parser.add_argument("--contrast", type=float, default=12)
    parser.add_argument("--noise", type=float, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", type=Path, default=Path("benchmarks/data/codec"))
    args = parser.parse_args()
    shutil.rmtree(args.data, ignore_errors=True)
    args.data.mkdir(parents=True)
    sources = {
        "images": images(args.rows, contrast=args.contrast, noise=args.noise),
        "tokens": tokens(args.rows // 8),
    }
    ways = {"raw": None, "auto": "auto", "blosc-zstd": [BloscCodec(cname="zstd", clevel=1, shuffle="noshuffle")]}
    for kind, values in sources.items():
        raw = zarr.open_group(args.data / f"{kind}.zarr", mode="w")
        raw.create_array("x", data=values, chunks=(max(1, 2**22 // values[0].nbytes), *values.shape[1:]))
        raw.create_array("id", data=np.arange(len(values)), chunks=(2**19,))
        stores = {}
        with dask.config.set(scheduler="threads"):
            for way, codec in ways.items():
                stores[way] = args.data / f"{kind}-{way}.zarr"
                ds.shuffle_zarr(raw.store.root, stores[way], n_piles=16, seed=0, compressors=codec)  # type: ignore[attr-defined]
        speeds: dict[str, list[float]] = {way: [] for way in ways}
        for epoch in range(args.repeat):
            for way, store in stores.items():
                began = time.perf_counter()
                n = sum(len(batch["id"]) for batch in ds.PileLoader(store, batch_size=1024, seed=epoch))
                speeds[way].append(n / (time.perf_counter() - began))
        print(f"\n{kind}: {len(values):,} rows of {values[0].nbytes:,} bytes ({values.dtype}{list(values.shape[1:])})")
        print("| store | on disk | x raw | cat rows/s | loader rows/s | x raw |\n|---|---:|---:|---:|---:|---:|")
        raw_size, raw_speed = nbytes_on_disk(stores["raw"]), statistics.median(speeds["raw"])
        for way, store in stores.items():
            files = [str(path) for path in store.rglob("*") if path.is_file() and "/c/" in str(path)]
            began = time.perf_counter()
            subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
            cat = len(values) / (time.perf_counter() - began)
            size, speed = nbytes_on_disk(store), statistics.median(speeds[way])
            print(
                f"| {way} | {size / 2**20:.1f} MiB | {size / raw_size:.2f} | {cat / 1e6:.2f}M "
                f"| {speed / 1e6:.3f}M | {speed / raw_speed:.2f} |"
            )


if __name__ == "__main__":
    main()
