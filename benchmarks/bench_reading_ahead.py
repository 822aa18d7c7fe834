"""Benchmark where a loader reads stores that decode: in a background thread, or in the consumer's.

``PileLoader`` reads a store whose reads are mostly decoding
(``PileReader.decodes``: a Parquet store, a Zarr store of compressed rows) in a
background thread even for a consumer that comes straight back for its next
batch. This runs whole epochs over the compressible Zarr store and the Parquet
store of ``bench_loader.py`` both ways, interleaved, with nothing done per
batch, and prints the median and best epoch of each.

Run ``python benchmarks/bench_reading_ahead.py --help``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from bench_loader import ROW_NBYTES, WIDTH, loader, open_or_make, open_or_make_parquet
from dask.utils import parse_bytes

from daskshuffle.readers._parquet_reader import ParquetPileReader
from daskshuffle.readers._zarr_reader import ZarrPileReader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1GiB", help="bytes of data (default 1GiB)")
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data", help="where the data goes")
    parser.add_argument("--repeat", type=int, default=7, help="epochs of each, interleaved")
    args = parser.parse_args()

    nbytes = parse_bytes(args.size)
    n_rows = nbytes // ROW_NBYTES
    stores = {
        "zarr tokens": (open_or_make(args.data, nbytes, None, "tokens")[1], ["tokens", "id"]),
        "parquet": (open_or_make_parquet(args.data, nbytes, None), ["id"] + [f"x{column}" for column in range(WIDTH)]),
    }
    decodes = ZarrPileReader.decodes
    seconds: dict[tuple[str, bool], list[float]] = {}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeat):
        for name, (store, variables) in stores.items():
            for background in (False, True):
                ZarrPileReader.decodes = decodes if background else property(lambda self: False)  # type: ignore[method-assign]
                ParquetPileReader.decodes = background
                began = time.perf_counter()
                loader(store, variables, 1024)
                seconds.setdefault((name, background), []).append(time.perf_counter() - began)
    print(
        f"\n{n_rows:,} rows, {args.repeat} epochs each; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after\n"
    )
    print("| store | reads | epoch s (median) | epoch s (best) | rows/s (median) | GB/s of rows (median) |")
    print("|---|---|---:|---:|---:|---:|")
    for (name, background), values in seconds.items():
        median = statistics.median(values)
        print(
            f"| {name} | {'background thread' if background else 'consumer'} | {median:.3f} | {min(values):.3f} | "
            f"{n_rows / median / 1e6:.2f}M | {n_rows * ROW_NBYTES / median / 1e9:.2f} |"
        )


if __name__ == "__main__":
    main()
