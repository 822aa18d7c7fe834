"""How Parquet pieces should be stored: Arrow IPC uncompressed, LZ4 or zstd, or Parquet.

Pass 1 writes every block once, in piece order, one record batch (or row group)
per pile; the merge reads it back once. This writes and reads one block of
``--rows`` rows of the ``bench_parquet.py`` table in ``--n-piles`` pieces each
way, on the local disk, and prints the times. Run
``python benchmarks/bench_parquet_pieces.py --help``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from bench_parquet import make_table


def ipc(table: pa.Table, path: Path, codec: str | None, n_piles: int) -> tuple[float, float]:
    began = time.perf_counter()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema, options=options) as writer:
        for batch in table.to_batches(max_chunksize=max(1, table.num_rows // n_piles)):
            writer.write_batch(batch)
    written = time.perf_counter()
    reader = pa.ipc.open_file(pa.memory_map(str(path)))
    pa.Table.from_batches([reader.get_batch(i) for i in range(reader.num_record_batches)]).combine_chunks()
    return written - began, time.perf_counter() - written


def parquet(table: pa.Table, path: Path, n_piles: int) -> tuple[float, float]:
    began = time.perf_counter()
    pq.write_table(table, path, compression="none", row_group_size=max(1, table.num_rows // n_piles))
    written = time.perf_counter()
    pq.read_table(path).combine_chunks()
    return written - began, time.perf_counter() - written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--n-piles", type=int, default=512)
    args = parser.parse_args()
    table = make_table(0, args.rows, np.random.default_rng(0))
    print(f"one block: {args.rows:,} rows, {table.nbytes / 2**20:.0f} MiB in memory, {args.n_piles} pieces")
    with tempfile.TemporaryDirectory() as directory:
        for name, run in [
            ("ipc, uncompressed", lambda p: ipc(table, p, None, args.n_piles)),
            ("ipc, lz4", lambda p: ipc(table, p, "lz4", args.n_piles)),
            ("ipc, zstd", lambda p: ipc(table, p, "zstd", args.n_piles)),
            ("parquet, uncompressed", lambda p: parquet(table, p, args.n_piles)),
        ]:
            path = Path(directory) / "pieces"
            write, read = run(path)
            print(f"| {name} | {write:.2f} | {read:.2f} | {os.path.getsize(path) / 2**20:.0f} MiB |")


if __name__ == "__main__":
    main()
