"""Whether a keyed check of each chunk fits the loader's speed budget: its cost against crc32c's.

The per-read checks compare each chunk's crc32c with the store's table: they
catch accidents, not a writer who recomputes the table. A keyed hash (a MAC
whose key the writer does not have) would catch that writer too, if it cost
at most 5% of the loader's rows/s. This times, on 4 MiB chunks of random
bytes, in one thread: crc32c (the ``crc32c`` package the loader uses, and
google-crc32c), keyed BLAKE2b and BLAKE2s (``hashlib``), and HMAC-SHA256.
Each figure is the best of ``--repeat`` runs over ``--chunks`` chunks.

The budget: at the loader's rate of ``--loader-gbps`` (1.40 GB/s, the
``PileLoader`` figure of ``benchmarks/RESULTS.md``), a 4 MiB chunk is yielded
every ~3 ms; a check adding more than 5% of that does not fit.

Run ``python benchmarks/bench_keyed_check.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import time
from collections.abc import Callable

import google_crc32c
import numpy as np

from daskshuffle.formats import crc32c


def _best(check: Callable[[bytes], object], chunks: list[bytes], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for chunk in chunks:
            check(chunk)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=32, help="4 MiB chunks a run checks")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loader-gbps", type=float, default=1.40, help="the loader's rate, GB/s of rows")
    args = parser.parse_args()
    size = 4 * 2**20
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(args.chunks)]
    key = os.urandom(32)
    checks: dict[str, Callable[[bytes], object]] = {
        "crc32c (crc32c package)": crc32c,
        "crc32c (google-crc32c)": google_crc32c.value,
        "keyed blake2b": lambda data: hashlib.blake2b(data, key=key, digest_size=16).digest(),
        "keyed blake2s": lambda data: hashlib.blake2s(data, key=key, digest_size=16).digest(),
        "hmac-sha256": lambda data: hmac.digest(key, data, "sha256"),
    }
    per_chunk_budget = size / (args.loader_gbps * 1e9)
    print(
        f"loader at {args.loader_gbps} GB/s: {per_chunk_budget * 1e3:.2f} ms a 4 MiB chunk; 5% is "
        f"{per_chunk_budget * 0.05 * 1e3:.3f} ms"
    )
    print(f"{'check':26} {'GB/s':>6} {'ms/chunk':>9} {'of the loader':>14}")
    for name, check in checks.items():
        seconds = _best(check, chunks, args.repeat) / len(chunks)
        print(f"{name:26} {size / seconds / 1e9:6.2f} {seconds * 1e3:9.3f} {seconds / per_chunk_budget:13.0%}")


if __name__ == "__main__":
    main()
