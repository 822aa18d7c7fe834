"""Benchmark reading a pile store: the plain read of its files, zarr, the pile reader, ``PileLoader``.

On a pile store of ``x`` (N, 64) float32 and ``id`` (N,) int64, in one process,
page cache warm, one table of rows/s and GB/s, every contender next to the
ceiling measured in the same run:

- ``cat``: every chunk file of the store read once with ``open().read()``, no
  decoding: the machine's read speed for these bytes;
- ``cat + permute``: the same files read into one buffer a window of 64 MiB at a
  time (a compressed variable decoded), each window's rows then gathered in a
  random order into batches (``take``): the passes over memory that a loader
  shuffling in RAM cannot avoid, its own ceiling;
- ``zarr piles``: ``group[name][a:b]`` of every pile, what zarr-python gives;
- ``reader piles``: ``ZarrPileReader.read_pile`` of every pile (``x`` and
  ``id``, then ``x`` alone): the read path the loader uses;
- ``loader``: ``PileLoader(store, batch_size)``, a whole epoch (``x`` + ``id``
  and ``x`` alone);
- ``DataLoader w=2``: ``DataLoader(PileDataset(...), batch_size=None,
  num_workers=2)``, against the in-process loader;
- the compressible variant: ``tokens`` (N, 64) int32 token ids (Zipf) + ``id``,
  whose layout gets blosc-lz4: its size on disk, ``cat`` of its files, the
  reader and the loader in decoded GB/s;
- ``DataLoader w=2, ready-made batches``: a dataset that yields batches of
  the same size already made, sent as ``PileDataset`` sends them: what
  ``DataLoader``'s own transport allows, the ceiling of ``DataLoader w=2``;
- ``tokens: cat + decode``: every chunk file of the compressible store read
  and blosc-decoded once in one thread, nothing else: the ceiling of its reader;
- the Parquet variants: the same rows as ``id`` and 64 float32 columns, or as
  ``id`` and one ``fixed_size_list<float32>[64]`` column (an embedding),
  shuffled by ``shuffle_parquet`` into Parquet pile stores: the plain read of
  their files and ``PileLoader`` over them;
- ``naive random``: random minibatches of the *source* (4 MiB zstd chunks)
  through ``x.oindex[sorted(idx)]``, time-boxed by ``--random-seconds`` and
  extrapolated to an epoch.

Contenders run interleaved for ``--repeat`` rounds (same machine load); the
table gives the median and the best. Then the consumer's side: with
``--work-ms`` of work per batch, the wait for the first batch and the p99 wait
per batch over two epochs. The 1-minute load average is printed before and after.

Run ``python benchmarks/bench_loader.py --help``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import zarr
from dask.utils import format_bytes, parse_bytes

import daskshuffle
from daskshuffle.readers._zarr_reader import ZarrPileReader

WIDTH = 64
ROW_NBYTES = WIDTH * 4 + 8
SOURCE_CHUNK_ROWS = 16_384  # 4 MiB chunks of x


# -- the data --------------------------------------------------------------------
def make_source(path: Path, n_rows: int, kind: str) -> None:
    """``x`` standard normal with ``x[:, 0] == id`` (or ``tokens``: Zipf int32 ids), and ``id``."""
    group = zarr.open_group(path, mode="w", zarr_format=3)
    name, dtype = ("x", "f4") if kind == "x" else ("tokens", "i4")
    values = group.create_array(name, shape=(n_rows, WIDTH), chunks=(SOURCE_CHUNK_ROWS, WIDTH), dtype=dtype)
    ids = group.create_array("id", shape=(n_rows,), chunks=(SOURCE_CHUNK_ROWS,), dtype="i8")
    rng = np.random.default_rng(0)
    step = SOURCE_CHUNK_ROWS * 16
    for start in range(0, n_rows, step):
        stop = min(start + step, n_rows)
        if kind == "x":
            block = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
            block[:, 0] = np.arange(start, stop)
        else:
            block = (rng.zipf(1.2, size=(stop - start, WIDTH)) % 50_000).astype(np.int32)
        values[start:stop] = block
        ids[start:stop] = np.arange(start, stop, dtype=np.int64)
    group.attrs["n_rows"] = n_rows  # last: a half-written source is made again


def open_or_make(data: Path, nbytes: int, n_piles: int | None, kind: str) -> tuple[str, str]:
    """The source and its pile store (default layout), made on first use."""
    n_rows = nbytes // ROW_NBYTES
    name = format_bytes(nbytes).replace(" ", "")
    source = data / f"loader-source-{kind}-{name}.zarr"
    if not (source.exists() and zarr.open_group(source, mode="r").attrs.get("n_rows") == n_rows):
        print(f"generating {source} ({n_rows:,} rows) ...", flush=True)
        make_source(source, n_rows, kind)
    piles = data / f"loader-piles-{kind}-{name}-{n_piles or 'default'}.zarr"
    try:
        daskshuffle.PileLoader(piles, 1).close()
    except daskshuffle.DaskShuffleError:
        print(f"shuffling into {piles} ...", flush=True)
        extra = {} if n_piles is None else {"n_piles": n_piles}
        print(" ", daskshuffle.shuffle_zarr(source, piles, seed=0, overwrite=True, **extra), flush=True)
    return str(source), str(piles)


def open_or_make_parquet(data: Path, nbytes: int, n_piles: int | None, embedding: bool = False) -> str:
    """A Parquet pile store of the same rows as ``x`` + ``id``, made on first use.

    ``x`` is 64 float32 columns, or with ``embedding`` one ``fixed_size_list<float32>[64]`` column.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    n_rows = nbytes // ROW_NBYTES
    name = format_bytes(nbytes).replace(" ", "")
    kind = "parquet-embedding" if embedding else "parquet"
    piles = data / f"loader-piles-{kind}-{name}-{n_piles or 'default'}"
    try:
        daskshuffle.PileLoader(piles, 1).close()
        return str(piles)
    except daskshuffle.DaskShuffleError:
        pass
    source = data / f"loader-source-{kind}-{name}"
    source.mkdir(parents=True, exist_ok=True)
    print(f"generating {source} ({n_rows:,} rows) and shuffling it into {piles} ...", flush=True)
    rng = np.random.default_rng(0)
    step = SOURCE_CHUNK_ROWS * 16
    for part, start in enumerate(range(0, n_rows, step)):
        stop = min(start + step, n_rows)
        x = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
        ids = np.arange(start, stop, dtype=np.int64)
        if embedding:
            table = pa.table({"id": ids, "x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), WIDTH)})
            pq.write_table(table, source / f"part-{part:04d}.parquet")
            continue
        frame = pd.DataFrame({f"x{column}": x[:, column] for column in range(WIDTH)})
        frame.insert(0, "id", ids)
        frame.to_parquet(source / f"part-{part:04d}.parquet", index=False)
    extra = {} if n_piles is None else {"n_piles": n_piles}
    print(" ", daskshuffle.shuffle_parquet(source, piles, seed=0, overwrite=True, **extra), flush=True)
    return str(piles)


def chunk_files(store: str, names: list[str]) -> list[str]:
    return [
        os.path.join(root, file)
        for name in names
        for root, _, files in os.walk(os.path.join(store, name, "c"))  # the chunk files, not the crc32c table
        for file in files
    ]


# -- the contenders (each returns rows handed out and bytes of rows) ---------------
def cat(store: str, names: list[str]) -> int:
    nbytes = 0
    for path in chunk_files(store, names):
        with open(path, "rb") as file:
            nbytes += len(file.read())
    return nbytes


def _permuted(
    buffer: np.ndarray, dtype: np.dtype, row_shape: tuple[int, ...], rng: np.random.Generator, batch_size: int
) -> int:
    """The rows in ``buffer`` gathered in a random order, ``batch_size`` rows into each new array: their bytes."""
    rows = buffer.view(dtype).reshape(-1, *row_shape)
    order = rng.permutation(len(rows))
    return sum(rows.take(order[start : start + batch_size], axis=0).nbytes for start in range(0, len(rows), batch_size))


def _chunk_index(path: str) -> int:
    return int(path.split(f"{os.sep}c{os.sep}")[1].split(os.sep)[0])


def cat_permute(store: str, names: list[str], batch_size: int, window_nbytes: int = 64 * 2**20) -> int:
    """Every chunk file of ``names`` read into a buffer (blosc-decoded, for a variable the layout compresses), a window
    of about ``window_nbytes`` at a time, then the window's rows gathered in a random order into batches. Each
    file: the chunk's bytes and a 4-byte crc32c (not checked)."""
    import numcodecs.blosc

    group = zarr.open_group(store, mode="r")
    codecs = group.attrs["daskshuffle"]["layout"]["variables"]
    rng = np.random.default_rng(0)
    moved = 0
    for name in names:
        array, plain = group[name], codecs[name]["codec"] == "none"
        paths = sorted(chunk_files(store, [name]), key=_chunk_index)
        chunk_nbytes = array.chunks[0] * array.dtype.itemsize * int(np.prod(array.shape[1:]))
        buffer = np.empty(window_nbytes + max(chunk_nbytes + 4, *map(os.path.getsize, paths)), dtype=np.uint8)
        filled = 0
        for path in paths:
            with open(path, "rb", buffering=0) as file:
                if plain:
                    filled += file.readinto(memoryview(buffer)[filled:]) - 4  # the crc32c: overwritten next
                else:
                    decoded = numcodecs.blosc.decompress(file.read()[:-4])
                    buffer[filled : filled + len(decoded)] = np.frombuffer(decoded, dtype=np.uint8)
                    filled += len(decoded)
            if filled >= window_nbytes or path == paths[-1]:
                moved += _permuted(buffer[:filled], array.dtype, array.shape[1:], rng, batch_size)
                filled = 0
    return moved


def cat_decode(store: str, names: list[str]) -> int:
    """Every chunk file read and blosc-decoded (its crc32c cut off, not checked) in this thread."""
    import numcodecs.blosc

    nbytes = 0
    for path in chunk_files(store, names):
        with open(path, "rb") as file:
            nbytes += len(numcodecs.blosc.decompress(file.read()[:-4]))
    return nbytes


def files(directory: str) -> int:
    """Every file under ``directory`` read once, in 1 MiB reads into one buffer: the plain read of a Parquet store.

    (``file.read()`` of a 40 MB part file into a fresh bytes object page-faults on every page: half the speed.)
    """
    nbytes = 0
    buffer = bytearray(2**20)
    for root, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(root, name), "rb", buffering=0) as file:
                while size := file.readinto(buffer):
                    nbytes += size
    return nbytes


def zarr_piles(store: str, names: list[str]) -> int:
    group = zarr.open_group(store, mode="r")
    offsets = group.attrs["daskshuffle"]["pile_offsets"]
    arrays = [group[name] for name in names]
    return sum(array[a:b].nbytes for a, b in itertools.pairwise(offsets) for array in arrays)


def reader_piles(store: str, names: list[str]) -> int:
    with ZarrPileReader(store, variables=names) as reader:
        return sum(
            values.nbytes for pile in range(len(reader.pile_offsets) - 1) for values in reader.read_pile(pile).values()
        )


def loader(store: str, names: list[str], batch_size: int) -> int:
    with daskshuffle.PileLoader(store, batch_size, variables=names) as piles:
        return sum(values.nbytes for batch in piles for values in batch.values())


def torch_piles(store: str, names: list[str], batch_size: int, num_workers: int) -> int:
    from torch.utils.data import DataLoader

    from daskshuffle.torch import PileDataset

    dataset = PileDataset(store, batch_size, variables=names)
    batches = DataLoader(dataset, batch_size=None, num_workers=num_workers)
    return sum(_nbytes(batch) for batch in batches)


def ready_batches(n_rows: int, batch_size: int, num_workers: int) -> int:
    """``DataLoader`` over batches of ``x`` + ``id`` made once: the transport alone, as ``PileDataset`` uses it."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    from daskshuffle._torch_dataloader import ByValue

    class Ready(IterableDataset):
        def __iter__(self) -> Iterator[object]:
            info = get_worker_info()
            share = -(-n_rows // batch_size) // (info.num_workers if info else 1)
            x = torch.from_numpy(np.ones((batch_size, WIDTH), dtype=np.float32))
            ids = torch.from_numpy(np.arange(batch_size, dtype=np.int64))
            for _ in range(share):
                yield ByValue({"x": x, "id": ids})

    return sum(_nbytes(batch) for batch in DataLoader(Ready(), batch_size=None, num_workers=num_workers))


def _nbytes(batch: object) -> int:
    if isinstance(batch, dict):
        return sum(_nbytes(value) for value in batch.values())
    if isinstance(batch, tuple | list):
        return sum(_nbytes(value) for value in batch)
    return int(batch.nbytes)  # type: ignore[attr-defined]


def random_oindex(source: str, batch_size: int, seconds: float) -> tuple[int, float]:
    """Rows/s of random minibatches of the source, time-boxed."""
    group = zarr.open_group(source, mode="r")
    arrays = [group["x"], group["id"]]
    n_rows = arrays[0].shape[0]
    rng = np.random.default_rng(0)
    rows, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        index = np.sort(rng.choice(n_rows, size=batch_size, replace=False))
        rows += len(arrays[1].oindex[index])
        arrays[0].oindex[index]
    return rows, time.perf_counter() - began


def waits(store: str, batch_size: int, work_seconds: float, epochs: int = 2) -> tuple[float, list[float]]:
    """Milliseconds to the first batch after ``iter``, and every other wait, with work per batch."""
    out: list[float] = []
    first = 0.0
    with daskshuffle.PileLoader(store, batch_size) as piles:
        for epoch in range(epochs):
            iterator = iter(piles)
            index = 0
            while True:
                began = time.perf_counter()
                batch = next(iterator, None)
                wait = 1000 * (time.perf_counter() - began)
                if batch is None:
                    break
                if epoch == 0 and index == 0:
                    first = wait
                else:
                    out.append(wait)
                index += 1
                time.sleep(work_seconds)
    return first, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1GiB", help="bytes of data (default 1GiB)")
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data", help="where the data goes")
    parser.add_argument("--n-piles", type=int, default=None, help="piles (default: shuffle_zarr's default)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of every contender, interleaved")
    parser.add_argument("--random-seconds", type=float, default=10.0, help="time box of the naive random reads")
    parser.add_argument("--work-ms", type=float, default=1.0, help="work per batch while measuring waits")
    parser.add_argument("--no-torch", action="store_true", help="skip DataLoader(PileDataset)")
    parser.add_argument("--no-tokens", action="store_true", help="skip the compressible variant")
    parser.add_argument("--no-parquet", action="store_true", help="skip the Parquet variant")
    args = parser.parse_args()

    args.data.mkdir(parents=True, exist_ok=True)
    nbytes = parse_bytes(args.size)
    source, store = open_or_make(args.data, nbytes, args.n_piles, "x")
    tokens = None if args.no_tokens else open_or_make(args.data, nbytes, args.n_piles, "tokens")[1]
    parquet = None if args.no_parquet else open_or_make_parquet(args.data, nbytes, args.n_piles)
    embedding = None if args.no_parquet else open_or_make_parquet(args.data, nbytes, args.n_piles, embedding=True)
    group = zarr.open_group(store, mode="r")
    metadata = group.attrs["daskshuffle"]
    n_rows, n_piles = metadata["n_rows"], metadata["n_piles"]
    layout = metadata.get("layout", {}).get("variables", {})
    print(
        f"store {store}: {n_rows:,} rows, {format_bytes(n_rows * ROW_NBYTES)}, {n_piles} piles, layout {layout}",
        flush=True,
    )
    load_before = os.getloadavg()[0]
    b = args.batch_size
    both, alone = ["x", "id"], ["x"]
    contenders: dict[str, tuple[int, Callable[[], int]]] = {
        "cat x+id": (n_rows, lambda: cat(store, both)),
        "cat + permute x+id": (n_rows, lambda: cat_permute(store, both, b)),
        "zarr piles x+id": (n_rows, lambda: zarr_piles(store, both)),
        "reader piles x+id": (n_rows, lambda: reader_piles(store, both)),
        "reader piles x": (n_rows, lambda: reader_piles(store, alone)),
        "loader x+id": (n_rows, lambda: loader(store, both, b)),
        "loader x": (n_rows, lambda: loader(store, alone, b)),
    }
    if not args.no_torch:
        contenders["DataLoader w=2 x+id"] = (n_rows, lambda: torch_piles(store, both, b, 2))
        contenders["DataLoader w=0 x+id"] = (n_rows, lambda: torch_piles(store, both, b, 0))
        contenders["DataLoader w=2, ready-made batches"] = (n_rows, lambda: ready_batches(n_rows, b, 2))
    if tokens is not None:
        pair = ["tokens", "id"]
        contenders["tokens: cat"] = (n_rows, lambda: cat(tokens, pair))
        contenders["tokens: zarr piles"] = (n_rows, lambda: zarr_piles(tokens, pair))
        contenders["tokens: reader piles"] = (n_rows, lambda: reader_piles(tokens, pair))
        contenders["tokens: cat + decode"] = (n_rows, lambda: cat_decode(tokens, pair))
        contenders["tokens: loader"] = (n_rows, lambda: loader(tokens, pair, b))
    if parquet is not None:
        columns = ["id"] + [f"x{column}" for column in range(WIDTH)]
        contenders["parquet: cat"] = (n_rows, lambda: files(parquet))
        contenders["parquet: loader"] = (n_rows, lambda: loader(parquet, columns, b))
    if embedding is not None:
        contenders["parquet, x one list column: cat"] = (n_rows, lambda: files(embedding))
        contenders["parquet, x one list column: loader"] = (n_rows, lambda: loader(embedding, both, b))

    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    moved: dict[str, int] = {}
    for round_ in range(args.repeat):
        for name, (_, contender) in contenders.items():
            began = time.perf_counter()
            moved[name] = contender()
            seconds[name].append(time.perf_counter() - began)
            print(f"  round {round_}: {name:<22} {seconds[name][-1]:7.2f} s", flush=True)
    random_rows, random_seconds = random_oindex(source, b, args.random_seconds)
    load_after = os.getloadavg()[0]

    median = {name: statistics.median(values) for name, values in seconds.items()}
    ceiling = n_rows / median["cat x+id"]
    print(
        f"\n{n_rows:,} rows ({format_bytes(n_rows * ROW_NBYTES)} of x+id), {n_piles} piles, batch_size={b}, "
        f"median of {args.repeat} rounds; load average {load_before:.2f} before, {load_after:.2f} after\n"
    )
    print("| read | rows/s (median) | rows/s (best) | GB/s of bytes moved | vs cat x+id |")
    print("|---|---:|---:|---:|---:|")
    for name, (rows, _) in contenders.items():
        rate, best = rows / median[name], rows / min(seconds[name])
        print(
            f"| {name} | {rate / 1e6:.2f}M | {best / 1e6:.2f}M | {moved[name] / median[name] / 1e9:.2f} | "
            f"{rate / ceiling:.2f} |"
        )
    random_rate = random_rows / random_seconds
    print(
        f"| naive random minibatches of the source (extrapolated) | {random_rate / 1e6:.4f}M | | | {random_rate / ceiling:.4f} |"
    )

    print("\nratios (medians):")
    ratio = {name: n_rows / value for name, value in median.items()}
    print(f"  loader x+id / cat x+id: {ratio['loader x+id'] / ratio['cat x+id']:.2f}")
    print(f"  loader x+id / loader x (id's cost): {ratio['loader x+id'] / ratio['loader x']:.2f}")
    print(f"  reader x+id / zarr x+id: {ratio['reader piles x+id'] / ratio['zarr piles x+id']:.2f}")
    print(f"  loader x+id / naive random: {ratio['loader x+id'] / random_rate:,.0f}")
    if "DataLoader w=2 x+id" in ratio:
        print(f"  DataLoader w=2 / loader in process: {ratio['DataLoader w=2 x+id'] / ratio['loader x+id']:.2f}")
        print(
            "  DataLoader w=2 of ready-made batches / loader in process (the transport's ceiling): "
            f"{ratio['DataLoader w=2, ready-made batches'] / ratio['loader x+id']:.2f}"
        )
    if parquet is not None:
        print(f"  parquet: loader / its cat: {ratio['parquet: loader'] / ratio['parquet: cat']:.2f}")
    if embedding is not None:
        print(
            "  parquet, x one list column: loader / its cat: "
            f"{ratio['parquet, x one list column: loader'] / ratio['parquet, x one list column: cat']:.2f}; "
            f"/ 64 columns: {ratio['parquet, x one list column: loader'] / ratio['parquet: loader']:.2f}"
        )
    if tokens is not None:
        stored = sum(os.path.getsize(path) for path in chunk_files(tokens, ["tokens", "id"]))
        decoded = n_rows * ROW_NBYTES
        print(
            f"  tokens: {format_bytes(stored)} on disk for {format_bytes(decoded)} of rows "
            f"(ratio {decoded / stored:.2f}); loader {decoded / median['tokens: loader'] / 1e9:.2f} GB/s decoded, "
            f"{ratio['tokens: loader'] / ratio['tokens: cat']:.2f} of its cat, "
            f"{ratio['tokens: loader'] / ratio['tokens: cat + decode']:.2f} of reading and decoding its files alone "
            f"({decoded / median['tokens: cat + decode'] / 1e9:.2f} GB/s decoded)"
        )

    first, every = waits(store, b, args.work_ms / 1000)
    ms = sorted(every)
    print(
        f"\nwith {args.work_ms:g} ms of work per batch, two epochs: first batch {first:.1f} ms after iter; "
        f"then p50 {statistics.median(ms):.3f} ms, p99 {ms[int(0.99 * (len(ms) - 1))]:.3f} ms, "
        f"max {ms[-1]:.1f} ms over {len(ms):,} batches; load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
