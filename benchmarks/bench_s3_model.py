"""Reading a pile store through a model of S3 (benchmarks/_s3_model.py), against local disk.

Builds a Zarr source of ``--size`` (``x`` (N, 64) float32 and ``id`` (N,)
int64, 1 MiB chunks) on local disk and its pile store (``--n-piles``) with
``shuffle_zarr`` (with ``--format parquet``: a Parquet source of the same rows,
``x`` a fixed-size list of 64 float32, in row groups of 64Ki rows, and its pile
store with ``shuffle_parquet``), written into a bucket of the model as a
shuffle writes it to object storage (the model's delays off), and copies it to
local disk for the local rows (the same files), then, interleaved for
``--repeat`` rounds, one table of medians:

- ``cat model``: every file of the pile store read once through the model, all
  requests at once on the filesystem's event loop, each dropped as it arrives:
  the ceiling of the model for these bytes;
- ``loader model``: one ``PileLoader`` epoch (``--batch-size``, ``--prefetch``,
  ``--work-ms`` of sleep per batch as a training step) from
  ``s3model://bench/piles.zarr`` (or ``piles.parquet``), with the requests it made;
- ``loader model, two streams``: the same rows read as a mixture of two
  streams of the store, half of its rows each (a composed reader);
- ``loader model, cached``: the same epoch with ``cache=`` a local directory that an
  epoch before the rounds filled (an epoch after the first);
- ``loader model, cached, later epoch``: the second epoch of one such loader,
  timed alone (no opening of the store; the requests of both epochs counted);
- ``loader local``: the same epoch from local disk, and ``loader local, later
  epoch`` the second epoch of one loader;
- ``cat local``: every file of the local pile store read once by 8 threads;
- unless ``--no-shuffle``, ``shuffle local``, ``shuffle model`` and ``shuffle
  model, tmp local``: the shuffle of the source into a new destination (the
  round before's output removed first, untimed), local -> local, S3 -> S3
  through the model, and S3 -> S3 with ``tmp=`` on local disk.

Each row shows seconds, rows/s, GB/s of the pile store's bytes, requests (model
rows), and a ratio: the loader to the ``cat`` of its storage, and the model's
loader to the local loader. The local files sit in the page cache: ``local``
means memory-speed reads. An epoch of a new loader includes opening the store
(a few round trips on the model). Run ``python benchmarks/bench_s3_model.py --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _s3_model import S3ModelFileSystem
from bench_s3 import ROW_NBYTES, WIDTH, make_source
from dask.utils import format_bytes, parse_bytes
from fsspec.asyn import sync

import daskshuffle

BUCKET = "bench"


#: What the last epoch measured besides its time: seconds to its first batch, and the most bytes fetched ahead.
LAST_EPOCH: dict[str, float] = {}


def epoch(
    store: Any,
    storage_options: dict[str, Any] | None,
    batch_size: int,
    prefetch: Any,
    work_s: float,
    cache: Path | None = None,
    later: bool = False,
) -> int | float:
    """Rows of one epoch of a new loader; with ``later``, the seconds of its second epoch (the first untimed)."""
    rows, peak, kept = 0, 0, 0
    began = time.perf_counter()
    with daskshuffle.PileLoader(
        store, batch_size=batch_size, seed=0, prefetch=prefetch, cache=cache, storage_options=storage_options
    ) as loader:
        reader = loader._piles.reader
        if later:
            for _ in loader:
                pass
            began = time.perf_counter()
        for batch in loader:
            if not rows:
                LAST_EPOCH["first batch s"] = time.perf_counter() - began
            rows += len(batch["id"])
            peak = max(peak, reader.fetched_nbytes)
            fetches = getattr(getattr(reader, "_files", None), "fetches", None)  # a Zarr store's shared chunks kept
            kept = max(kept, fetches.kept_nbytes if fetches is not None else 0)
            if work_s:
                time.sleep(work_s)  # a training step, outside the GIL
        seconds = time.perf_counter() - began
    LAST_EPOCH["read ahead peak"] = peak
    LAST_EPOCH["kept peak"] = kept
    return seconds if later else rows


#: Rows of a row group of the Parquet source.
SOURCE_GROUP_ROWS = 2**16


def make_parquet_source(path: Path, n_rows: int) -> None:
    """The rows of ``bench_s3.make_source`` as a Parquet file: ``x`` a fixed-size list of WIDTH float32, ``id``."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    schema = pa.schema([("x", pa.list_(pa.float32(), WIDTH)), ("id", pa.int64())])
    with pq.ParquetWriter(path / "part-0.parquet", schema) as writer:
        for start in range(0, n_rows, SOURCE_GROUP_ROWS):
            stop = min(start + SOURCE_GROUP_ROWS, n_rows)
            block = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
            block[:, 0] = np.arange(start, stop)
            x = pa.FixedSizeListArray.from_arrays(pa.array(block.reshape(-1)), WIDTH)
            writer.write_table(pa.table({"x": x, "id": np.arange(start, stop)}, schema=schema))


def shuffle(
    src: str,
    dst: str,
    options: dict[str, Any] | None,
    tmp: str | None,
    n_piles: int,
    kind: str = "zarr",
    seed: int = 1,
    chunk_rows: int | None = None,
) -> None:
    if kind == "parquet":
        daskshuffle.shuffle_parquet(src, dst, n_piles, seed=seed, tmp=tmp, overwrite=True, storage_options=options)
    else:
        daskshuffle.shuffle_zarr(
            src, dst, n_piles, seed=seed, tmp=tmp, overwrite=True, storage_options=options, chunk_rows=chunk_rows
        )


def cat_local(files: list[Path]) -> int:
    with ThreadPoolExecutor(8) as pool:
        return sum(len(data) for data in pool.map(Path.read_bytes, files))


def cat_model(fs: S3ModelFileSystem, files: list[str]) -> int:
    """Every file requested at once on the filesystem's event loop, each dropped as it arrives.

    The ceiling for the loader's work: the same requests, with nothing in the
    way (no thread between them, no memory held for the whole store, which
    ``fs.cat`` would keep and which costs a page fault a page to fill).
    """

    async def fetch_all() -> int:
        async def one(path: str) -> int:
            return len(await fs._cat_file(path))

        return sum(await asyncio.gather(*(one(path) for path in files)))

    total: int = sync(fs.loop, fetch_all)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256MiB", help="Source size (default 256MiB).")
    parser.add_argument("--n-piles", type=int, default=512, help="Piles (default 512).")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--prefetch", default="auto", help="PileLoader's prefetch: a size, or auto (default auto).")
    parser.add_argument("--work-ms", type=float, default=0.0, help="Sleep per batch, a training step (default 0).")
    parser.add_argument("--repeat", type=int, default=3, help="Rounds (default 3); medians are reported.")
    parser.add_argument("--latency", type=float, default=0.02, help="Seconds to the first byte (default 0.02).")
    parser.add_argument("--bandwidth", default="100MB", help="Per request, per second (default 100MB).")
    parser.add_argument("--total-bandwidth", default=None, help="Shared by all requests, per second (default none).")
    parser.add_argument("--max-in-flight", type=int, default=None, help="Requests at once (default no limit).")
    parser.add_argument(
        "--dir",
        default=None,
        help="Working directory (default a temporary one, removed); one built before for the same --format, --size "
        "and --n-piles is reused, so that the rounds run in a process that built nothing.",
    )
    parser.add_argument("--no-shuffle", action="store_true", help="Leave out the shuffles S3 -> S3.")
    parser.add_argument(
        "--chunk-rows",
        type=int,
        default=None,
        help="chunk_rows of the Zarr pile store read (default: shuffle_zarr's for object storage, half a pile).",
    )
    parser.add_argument(
        "--format", choices=("zarr", "parquet"), default="zarr", help="The pile store's format (default zarr)."
    )
    args = parser.parse_args()
    kind = args.format
    raw, piles, again = (f"{name}.{kind}" for name in ("raw", "piles", "again"))
    prefetch = args.prefetch
    n_rows = parse_bytes(args.size) // ROW_NBYTES
    options: dict[str, Any] = {
        "latency": args.latency,
        "bandwidth": float(parse_bytes(args.bandwidth)),
        "max_in_flight": args.max_in_flight,
        "total_bandwidth": None if args.total_bandwidth is None else float(parse_bytes(args.total_bandwidth)),
    }

    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-s3-model-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        began = time.perf_counter()
        built_marker = work / f"built-{kind}-{args.size}-{args.n_piles}-{args.chunk_rows or 'auto'}-on-object-storage"
        if not built_marker.exists():  # a --dir built before is reused: the rounds then run in a fresh process
            for path in (work / raw, work / piles, work / "objects" / BUCKET, work / "cache"):
                shutil.rmtree(path, ignore_errors=True)
            for other in work.glob("built-*"):  # what they marked is gone
                other.unlink()
            (make_parquet_source if kind == "parquet" else make_source)(work / raw, n_rows)
            shutil.copytree(work / raw, work / "objects" / BUCKET / raw)
            # The pile store is written as a shuffle writes it into object storage (its layout is chosen for
            # that), through the model without its delays; the local rows read a copy of the same files.
            instant = {"root": str(work / "objects"), "latency": 0.0, "bandwidth": 1e12}
            with dask.config.set(scheduler="threads"):
                shuffle(
                    str(work / raw),
                    f"s3model://{BUCKET}/{piles}",
                    instant,
                    None,
                    args.n_piles,
                    kind,
                    0,
                    args.chunk_rows,
                )
            shutil.copytree(work / "objects" / BUCKET / piles, work / piles)
            built_marker.touch()
        built = time.perf_counter() - began
        options["root"] = str(work / "objects")
        fs = S3ModelFileSystem(**options)
        local_files = sorted(path for path in (work / piles).rglob("*") if path.is_file())
        model_files = [f"{BUCKET}/{path.relative_to(work).as_posix()}" for path in local_files]
        nbytes = sum(path.stat().st_size for path in local_files)
        url = f"s3model://{BUCKET}/{piles}"

        table: dict[str, Callable[[], Any]] = {
            "cat model": lambda: cat_model(fs, model_files),
            "loader model": lambda: epoch(url, options, args.batch_size, prefetch, args.work_ms / 1e3),
            # The same rows as a mixture of two streams of the store: read through a composed reader.
            "loader model, two streams": lambda: epoch(
                [daskshuffle.Stream(url, choose=n_rows // 2), daskshuffle.Stream(url, choose=n_rows - n_rows // 2)],
                options,
                args.batch_size,
                prefetch,
                args.work_ms / 1e3,
            ),
            "loader model, cached": lambda: epoch(
                url, options, args.batch_size, prefetch, args.work_ms / 1e3, cache=work / "cache"
            ),
            "loader model, cached, later epoch": lambda: epoch(
                url, options, args.batch_size, prefetch, args.work_ms / 1e3, cache=work / "cache", later=True
            ),
            "loader local": lambda: epoch(str(work / piles), None, args.batch_size, prefetch, args.work_ms / 1e3),
            "loader local, later epoch": lambda: epoch(
                str(work / piles), None, args.batch_size, prefetch, args.work_ms / 1e3, later=True
            ),
            "cat local": lambda: cat_local(local_files),
        }
        if not args.no_shuffle:
            table["shuffle local"] = lambda: shuffle(str(work / raw), str(work / again), None, None, args.n_piles, kind)
            table["shuffle model"] = lambda: shuffle(
                f"s3model://{BUCKET}/{raw}", f"s3model://{BUCKET}/{again}", options, None, args.n_piles, kind
            )
            table["shuffle model, tmp local"] = lambda: shuffle(
                f"s3model://{BUCKET}/{raw}",
                f"s3model://{BUCKET}/{again}",
                options,
                str(work / "tmp"),
                args.n_piles,
                kind,
            )
        # Each shuffle writes a new destination: the round before's output goes first, untimed. (Replacing a
        # store on object storage adds a copy of every file into place, which a rename makes free on a disk.)
        before: dict[str, Callable[[], Any]] = {
            "shuffle local": lambda: shutil.rmtree(work / again, ignore_errors=True),
            "shuffle model": lambda: shutil.rmtree(work / "objects" / BUCKET / again, ignore_errors=True),
            "shuffle model, tmp local": lambda: shutil.rmtree(work / "objects" / BUCKET / again, ignore_errors=True),
        }
        extra: dict[str, dict[str, float]] = {}
        shutil.rmtree(work / "cache", ignore_errors=True)
        epoch(url, options, args.batch_size, prefetch, 0.0, cache=work / "cache")  # the first epoch fills the cache
        os.sync()  # the gigabytes just written are flushed now, not by the kernel during the rounds
        times: dict[str, list[float]] = {name: [] for name in table}
        requests: dict[str, dict[str, int]] = {}
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            for name, run in table.items():
                before.get(name, lambda: None)()
                fs.reset_stats()
                began = time.perf_counter()
                found = run()
                # A later epoch's run times itself (its first epoch untimed); the rest are timed whole.
                times[name].append(found if isinstance(found, float) else time.perf_counter() - began)
                requests[name] = {kind: n for kind, n in fs.stats()["requests"].items() if n}
                if name.startswith("loader"):
                    extra.setdefault(name, {}).update(LAST_EPOCH)
        load_after = os.getloadavg()[0]

        median = {name: statistics.median(values) for name, values in times.items()}
        model = ", ".join(f"{key}={value}" for key, value in options.items() if key != "root")
        print(
            f"{kind} pile store: {n_rows:,} rows, {args.n_piles} piles, {len(local_files):,} files, "
            f"{format_bytes(nbytes)} (built in {built:.1f} s); {args.repeat} rounds"
        )
        print(
            f"model: {model}; PileLoader batch_size={args.batch_size}, "
            f"prefetch={args.prefetch}, work per batch {args.work_ms} ms"
        )
        print(f"load average (1 min): {load_before:.2f} before, {load_after:.2f} after")
        print(f"{'':33} {'median s':>9} {'best s':>7} {'rows/s':>11} {'GB/s':>6} {'requests':>9}  ratio")
        ratios = {
            "loader model": ("cat model", "loader local"),
            "loader model, two streams": ("loader model",),
            "loader local": ("cat local",),
            "loader model, cached": ("loader local",),
            "loader model, cached, later epoch": ("loader local, later epoch",),
            "cat model": ("cat local",),
            "shuffle model": ("shuffle local",),
            "shuffle model, tmp local": ("shuffle local",),
        }
        for name in table:
            ratio = ", ".join(f"{median[name] / median[other]:.2f}x {other}" for other in ratios.get(name, ()))
            count = f"{sum(requests[name].values()):,}" if "model" in name else ""
            print(
                f"{name:33} {median[name]:9.2f} {min(times[name]):7.2f} {n_rows / median[name]:11,.0f} "
                f"{nbytes / median[name] / 1e9:6.2f} {count:>9}  {ratio}"
            )
        for name in [name for name in table if "model" in name]:
            print(f"requests of {name}: " + ", ".join(f"{kind} {n:,}" for kind, n in requests[name].items()))
        for name, values in extra.items():
            print(
                f"{name}: first batch {values['first batch s'] * 1e3:.0f} ms, "
                f"most bytes fetched ahead {format_bytes(int(values['read ahead peak']))}, "
                f"most kept for a read to come {format_bytes(int(values['kept peak']))}"
            )
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
