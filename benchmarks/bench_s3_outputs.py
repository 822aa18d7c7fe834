"""``shuffle_lines`` into many output files on the S3 model, against putting the same files at once.

Writes a local text corpus of ``--lines`` numbered lines, then, interleaved for
``--repeat`` rounds, on a bucket of the model (``benchmarks/_s3_model.py``,
``--latency`` seconds to the first byte):

- ``put model``: the output's bytes put as ``--files`` files, all at once on
  the filesystem's event loop (``fs.pipe``): the model's ceiling for writing
  these files;
- ``shuffle new``: ``shuffle_lines(corpus, "s3model://bench/out-{:05d}.txt",
  n_output_files=--files)`` into a prefix where nothing is;
- ``shuffle replacing``: the same call again with ``overwrite=True``, which
  writes each new file beside the old one and moves it into place;
- ``shuffle local``: the same call into a local directory, where nothing is:
  what the shuffle costs without the model's round trips.

Each shuffle runs on dask's threaded scheduler, its merge tasks' parts on the
model too. Prints the median seconds and the requests of each, and the ratios to
``put model``. Run ``python benchmarks/bench_s3_outputs.py --help``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import dask
from _s3_model import S3ModelFileSystem

import daskshuffle

BUCKET = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000, help="Lines of the corpus (default 1,000,000).")
    parser.add_argument("--files", type=int, default=100, help="Output files (default 100).")
    parser.add_argument("--n-piles", type=int, default=16, help="Piles (default 16).")
    parser.add_argument("--repeat", type=int, default=3, help="Rounds (default 3); medians are reported.")
    parser.add_argument("--latency", type=float, default=0.02, help="Seconds to the first byte (default 0.02).")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-s3-outputs-") as work:
        corpus = Path(work) / "corpus.txt"
        corpus.write_bytes(b"".join(b"line %09d\n" % i for i in range(args.lines)))
        options: dict[str, Any] = {"root": f"{work}/objects", "latency": args.latency, "bandwidth": 100e6}
        fs = S3ModelFileSystem(**options)
        fs.mkdir(BUCKET)
        dst = f"s3model://{BUCKET}/out-{{:05d}}.txt"
        files = args.files
        data = corpus.read_bytes()
        cuts = [len(data) * i // files for i in range(files + 1)]  # about the output's files, in bytes
        blobs = {f"{BUCKET}/put-{i:05d}.txt": data[cuts[i] : cuts[i + 1]] for i in range(files)}

        def put() -> None:
            fs.pipe(blobs)

        def shuffle(overwrite: bool, into: str = dst) -> None:
            with dask.config.set(scheduler="threads"):
                daskshuffle.shuffle_lines(
                    str(corpus), into, args.n_piles, seed=0, n_output_files=files, storage_options=options,
                    overwrite=overwrite,
                )  # fmt: skip

        times: dict[str, list[float]] = defaultdict(list)
        requests: dict[str, int] = {}
        for _ in range(args.repeat):
            fs.rm(f"{BUCKET}/", recursive=True)
            fs.mkdir(BUCKET)
            shutil.rmtree(Path(work) / "local", ignore_errors=True)
            runs = {
                "put model": put,
                "shuffle new": lambda: shuffle(False),
                "shuffle replacing": lambda: shuffle(True),
                "shuffle local": lambda: shuffle(False, f"{work}/local/out-{{:05d}}.txt"),
            }
            for name, run in runs.items():
                fs.reset_stats()
                began = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - began)
                requests[name] = sum(fs.stats()["requests"].values())

    ceiling, local = statistics.median(times["put model"]), statistics.median(times["shuffle local"])
    print(f"{args.lines:,} lines ({len(data) / 2**20:.1f} MiB) into {files} files, {args.n_piles} piles, "
          f"latency {args.latency * 1000:.0f} ms; medians of {args.repeat}")  # fmt: skip
    print(f"{'run':<20}{'median s':>10}{'best s':>10}{'requests':>10}  ratio")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        ratio = "" if name == "put model" else f"{median / ceiling:.2f}x put model"
        ratio += "" if name in ("put model", "shuffle local") else f", {median / local:.2f}x shuffle local"
        print(f"{name:<20}{median:>10.2f}{min(seconds):>10.2f}{requests[name]:>10,}  {ratio}")


if __name__ == "__main__":
    main()
