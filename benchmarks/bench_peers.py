"""daskshuffle against MosaicML Streaming (MDS, py1e and py1s), litdata and Ray Data, each with its defaults, on the same rows.

The rows are ``bench_loader.py``'s: ``x`` (N, 64) float32 and ``id`` (N,)
int64, generated once into ``benchmarks/data/peers-source-<size>.zarr``. Each
contender prepares its files from that source, timed: ``shuffle_zarr`` (a pile
store), ``MDSWriter`` (MDS shards, one ``write`` per row; py1e and py1s read the
same shards) and litdata's ``optimize`` (chunks of ``chunk_bytes="64MB"``, the
size its README uses; the argument has no default) and Ray Data's
``random_shuffle(seed=0).write_parquet()`` (``_ray_peer.py``: its global
shuffle, read every epoch again with ``random_shuffle(seed=epoch)``, or read in
order through a local buffer). Then, each measure in a fresh process (so that
memory and shared state start clean):

- an epoch in process: ``PileLoader(store, batch_size)``; the peers through
  their loaders without worker processes (torch ``DataLoader(dataset,
  batch_size, num_workers=0)`` for Streaming, ``litdata.StreamingDataLoader``
  for litdata), rows/s, and the time from making the dataset to its first batch;
- an epoch with a ``DataLoader`` of 2 worker processes (``PileDataset`` with
  ``batch_size=None`` for daskshuffle; none for Ray Data, whose own workers read);
- the peak memory of each epoch loop: the PSS of the process and its children
  (``psutil``'s ``memory_full_info``, polled every 10 ms from the parent) above
  the process's own PSS just before the loop, or, if larger, the growth of the
  process's own peak RSS over the loop (``VmHWM``, reset before it: an epoch in
  process can be shorter than a poll);
- the order of epochs 0 and 1 in process (the ``id`` of every row yielded), and
  ``daskshuffle.quality.report`` on it: epoch 0's 9 measures (batch, a pile of
  the pile store, 1% and 10% of the rows, and source chunks per batch), and the
  co-batch rate (of the pairs of rows that share a batch in epoch 0, the share
  that share one in epoch 1) against a uniform shuffle's;
- the plain read of each contender's files (every file read once), the
  ceiling of its loader.

A peer that takes longer than ``--peer-seconds`` over an epoch is stopped
there and its rows/s comes from that part of the epoch. Streaming's orders come
from its own planner (``get_partitions`` and ``get_shuffle``, as
``StreamingDataset`` calls them for one node, rank and worker), checked
against the ids its in-process epoch yielded; litdata's and Ray Data's come
from iterating them (Ray Data yields blocks as they are ready: its orders are
another run of the same loader, not checked against the epoch's).

    python benchmarks/bench_peers.py --size 64MiB                  # a few minutes
    make bench-peers PEERS_ARGS="--size 1GiB --peer-seconds 60"

MosaicML Streaming, litdata and Ray Data live in their own virtual environment
(``make bench-peers`` makes ``.venv-peers``); run with a python that lacks
those ``--only`` names, the script says so in one line and exits. It exits with
status 1 when an order measured is not the one the loader yielded.

Run ``python benchmarks/bench_peers.py --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _ray_peer
import numpy as np
from dask.utils import format_bytes, parse_bytes

WIDTH = 64
ROW_NBYTES = WIDTH * 4 + 8
SOURCE_CHUNK_ROWS = 16_384  # bench_loader.py's source: 4 MiB chunks of x
SOURCE_BLOCK_ROWS = SOURCE_CHUNK_ROWS * 16  # rows read from the source at a time while preparing
CONTENDERS = ["daskshuffle", "MDS py1e", "MDS py1s", "litdata", *_ray_peer.CONTENDERS]
PEERS = f"mosaicml-streaming 0.13.0, litdata 0.2.76 and {_ray_peer.RAY}"


def kind_of(contender: str) -> str:
    """The files a contender reads: ``MDS`` for Streaming's orders, ``Ray`` for Ray Data's, else its own."""
    if contender.startswith("MDS"):
        return "MDS"
    return _ray_peer.KIND if contender in _ray_peer.CONTENDERS else contender


# -- the peers' imports ----------------------------------------------------------------
def import_streaming() -> Any:
    """``streaming``, imported under a CPU build of torch.

    ``import streaming`` imports torchvision (for its vision datasets), whose PyPI wheels are built for
    CUDA torch: their compiled ops do not load, and torchvision 0.28's import then registers fake
    kernels for two of them, ``nms`` and ``qnms``, which fails unless their schemas exist. Defining the
    two schemas (as torchvision's own library does) lets the import through; nothing here calls them.
    """
    import torch

    if "streaming" not in sys.modules and not hasattr(torch.ops.torchvision, "nms"):
        global _TORCHVISION_SCHEMAS
        _TORCHVISION_SCHEMAS = torch.library.Library("torchvision", "FRAGMENT")
        for name in ("nms", "qnms"):
            _TORCHVISION_SCHEMAS.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import streaming

    return streaming


_TORCHVISION_SCHEMAS: Any = None


def peers_missing(contenders: list[str]) -> str | None:
    """Why ``contenders`` cannot run with this python, or None."""
    kinds = {kind_of(contender) for contender in contenders}
    try:
        import psutil  # noqa: F401

        if kinds - {_ray_peer.KIND}:  # the DataLoader of 2 workers
            import torch  # noqa: F401
        if "litdata" in kinds:
            import litdata  # noqa: F401
        if "MDS" in kinds:
            import_streaming()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return _ray_peer.ray_missing() if _ray_peer.KIND in kinds else None


# -- preparation -----------------------------------------------------------------------
def source_blocks(source: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    import zarr

    group = zarr.open_group(source, mode="r")
    n_rows = group["id"].shape[0]
    for start in range(0, n_rows, SOURCE_BLOCK_ROWS):
        stop = min(start + SOURCE_BLOCK_ROWS, n_rows)
        yield group["x"][start:stop], group["id"][start:stop]


def litdata_rows(block: tuple[str, int, int]) -> Iterator[dict[str, Any]]:
    """The rows ``start:stop`` of the source, one sample each: what ``optimize`` calls per input."""
    import zarr

    source, start, stop = block
    group = zarr.open_group(source, mode="r")
    x, ids = group["x"][start:stop], group["id"][start:stop]
    for row in range(stop - start):
        yield {"x": x[row], "id": int(ids[row])}


def prepare(contender: str, source: str, out: str) -> None:
    if contender == "daskshuffle":
        import daskshuffle

        daskshuffle.shuffle_zarr(source, out, seed=0)
    elif contender == "MDS":
        from streaming import MDSWriter

        with MDSWriter(out=out, columns={"x": f"ndarray:float32:{WIDTH}", "id": "int64"}) as writer:
            for x, ids in source_blocks(source):
                for row in range(len(ids)):
                    writer.write({"x": x[row], "id": ids[row]})
    elif contender == "litdata":
        import litdata
        import zarr

        n_rows = zarr.open_group(source, mode="r")["id"].shape[0]
        blocks = [(source, a, min(a + SOURCE_BLOCK_ROWS, n_rows)) for a in range(0, n_rows, SOURCE_BLOCK_ROWS)]
        litdata.optimize(fn=litdata_rows, inputs=blocks, output_dir=out, chunk_bytes="64MB")
    elif contender == _ray_peer.KIND:
        _ray_peer.prepare(source, out, SOURCE_BLOCK_ROWS)
    else:
        raise ValueError(contender)


# -- the loaders -----------------------------------------------------------------------
def make_batches(contender: str, store: str, batch_size: int, num_workers: int | None) -> Any:
    """An iterable of batches (dicts with ``id``): ``num_workers=None`` is the contender's own in-process loader."""
    if contender == "daskshuffle":
        import daskshuffle

        if num_workers is None:
            return daskshuffle.PileLoader(store, batch_size)
        from torch.utils.data import DataLoader

        from daskshuffle.torch import PileDataset

        return DataLoader(PileDataset(store, batch_size), batch_size=None, num_workers=num_workers)
    if contender.startswith("MDS"):
        import_streaming()
        from streaming import StreamingDataset
        from torch.utils.data import DataLoader

        algo = contender.split()[1]
        dataset = StreamingDataset(local=store, batch_size=batch_size, shuffle=True, shuffle_algo=algo)
        return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers or 0)
    if contender == "litdata":
        import litdata

        dataset = litdata.StreamingDataset(store, shuffle=True)
        return litdata.StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers or 0)
    if contender in _ray_peer.CONTENDERS:
        return _ray_peer.batches(contender, store, batch_size)
    raise ValueError(contender)


def import_loaders(contender: str) -> None:
    if contender in _ray_peer.CONTENDERS:
        _ray_peer.start()  # Ray's cluster starts before the loader is made, as a Ray user's does
        return
    import torch.utils.data  # noqa: F401

    if contender == "daskshuffle":
        import daskshuffle.torch  # noqa: F401
    elif contender.startswith("MDS"):
        import_streaming()
    else:
        import litdata  # noqa: F401


def ids_of(batch: Any) -> np.ndarray:
    return np.asarray(batch["id"]).astype(np.int64, copy=False)


def streaming_order(store: str, algo: str, batch_size: int, epoch: int) -> np.ndarray:
    """The ids one node, rank and worker of ``StreamingDataset`` yields in ``epoch``, from its planner.

    What ``generate_work_random_batching`` does (streaming 0.13.0), with the defaults that
    ``StreamingDataset._resume`` and ``_set_shuffle_block_size`` fill in for one node.
    """
    import_streaming()
    from streaming import StreamingDataset
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle

    dataset = StreamingDataset(local=store, batch_size=batch_size, shuffle=True, shuffle_algo=algo)
    n_nodes = dataset.num_canonical_nodes or (64 if algo in ("py1s", "py2s") else 1)
    block = dataset.shuffle_block_size or max(4_000_000 // n_nodes, 1 << 18)
    units, small_per_big = dataset.resample_streams(epoch)
    big = get_partitions(
        dataset.partition_algo, dataset.epoch_size, n_nodes, 1, 1, 1, batch_size, 0, dataset.initial_physical_nodes
    )
    shuffle = get_shuffle(algo, units, n_nodes, dataset.shuffle_seed, epoch, block)
    big = big.reshape(-1)
    return np.asarray(small_per_big[shuffle[big[big != -1]]], dtype=np.int64)


# -- one measure, in a fresh process ---------------------------------------------------
def pss(pid: int) -> int:
    """The PSS of process ``pid`` and its children, in bytes."""
    import psutil

    total = 0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += process.memory_full_info().pss
    return total


def run_epoch(task: dict[str, Any]) -> dict[str, Any]:
    """One epoch (or its first ``seconds``), timed from making the dataset, with the ids yielded."""
    contender, store, b = task["contender"], task["store"], task["batch_size"]
    seconds = task["seconds"]
    ids: list[np.ndarray] = []
    import_loaders(contender)  # imports are not the loader's start-up
    before = pss(os.getpid())  # the parent polls the peak from outside: a thread here would slow the loop
    rss_before = _reset_peak_rss()
    began = time.perf_counter()
    batches = make_batches(contender, store, b, task["num_workers"])
    first = None
    for batch in batches:
        ids.append(ids_of(batch))
        if first is None:
            first = time.perf_counter() - began
            began_rows = time.perf_counter()  # the rate leaves out the first batch's start-up
        if seconds and time.perf_counter() - began_rows > seconds:
            break
    ended = time.perf_counter()
    rss_growth = _status_kib("VmHWM") * 1024 - rss_before
    del batches
    rows = sum(len(part) for part in ids[1:])
    order = np.concatenate(ids)
    if task.get("ids_path"):
        np.save(task["ids_path"], order)
    return {
        "rows": len(order),
        "rate": rows / max(ended - began_rows, 1e-9),
        "first": first,
        "whole": ended - began,
        "before": before,
        "rss_growth": rss_growth,
    }


def _status_kib(field: str) -> int:
    """A field of ``/proc/self/status`` in KiB (``VmHWM``, ``VmRSS``); 0 where there is none."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _reset_peak_rss() -> int:
    """Reset the process's peak RSS to its RSS now (Linux: ``5`` into ``clear_refs``); the RSS, in bytes."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS") * 1024


def run_orders(task: dict[str, Any]) -> dict[str, Any]:
    """The ids of epochs 0 and 1 in process, saved to ``task["ids_path"]`` (``.npz``)."""
    contender, store, b = task["contender"], task["store"], task["batch_size"]
    if contender.startswith("MDS"):
        algo = contender.split()[1]
        epochs = [streaming_order(store, algo, b, epoch) for epoch in (0, 1)]
    elif contender in _ray_peer.CONTENDERS:
        epochs = [
            np.concatenate([ids_of(batch) for batch in _ray_peer.batches(contender, store, b, epoch)])
            for epoch in (0, 1)
        ]
    else:
        if contender == "daskshuffle":
            import daskshuffle

            batches = daskshuffle.PileLoader(store, b, variables=["id"])
        else:
            batches = make_batches(contender, store, b, None)
        epochs = [np.concatenate([ids_of(batch) for batch in batches]) for _ in (0, 1)]
    np.savez(task["ids_path"], epoch0=epochs[0], epoch1=epochs[1])
    return {"rows": [len(epoch) for epoch in epochs]}


def run_prepare(task: dict[str, Any]) -> dict[str, Any]:
    if task["contender"] in ("MDS", "litdata"):
        import_streaming()  # the peers' venv has it; litdata's optimize needs nothing more
    elif task["contender"] == _ray_peer.KIND:
        _ray_peer.start()  # Ray's cluster is up before the shuffle, as a Ray user's is
    began = time.perf_counter()
    prepare(task["contender"], task["source"], task["store"])
    return {"seconds": time.perf_counter() - began}


def in_fresh_process(task: dict[str, Any], poll: float = 0.01) -> dict[str, Any]:
    """Run ``task`` in a new python: its last line of output is the result, as JSON, with ``peak``.

    ``peak`` is the largest PSS of that process and its children, polled every ``poll`` seconds from
    here (its output goes to a file, so that nothing blocks on a full pipe meanwhile).
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, __file__, "--task", json.dumps(task)], stdout=out, stderr=err)
        peak = 0
        while child.poll() is None:
            peak = max(peak, pss(child.pid))
            time.sleep(poll)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        sys.stderr.write(stdout[-4000:] + stderr[-4000:])
        raise RuntimeError(f"{task['kind']} of {task['contender']} failed (exit status {child.returncode})")
    result: dict[str, Any] = json.loads(lines[-1])
    result["peak"] = max(peak - result.get("before", 0), result.get("rss_growth", 0))
    return result


# -- the plain read and the sizes ------------------------------------------------------
def files_of(store: str) -> list[str]:
    return [os.path.join(root, name) for root, _, names in os.walk(store) for name in sorted(names)]


def plain_read(store: str) -> float:
    """Seconds to read every file of ``store`` once, in 1 MiB reads into one buffer."""
    buffer = bytearray(2**20)
    began = time.perf_counter()
    for path in files_of(store):
        with open(path, "rb", buffering=0) as file:
            while file.readinto(buffer):
                pass
    return time.perf_counter() - began


def first_sightings(order: np.ndarray) -> np.ndarray:
    """``order`` without the rows it yields again (Streaming repeats a few to even out its canonical nodes)."""
    _, first = np.unique(order, return_index=True)
    return order[np.sort(first)]


def make_source(path: Path, n_rows: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_loader import make_source as make

    make(path, n_rows, "x")


# -- the report ------------------------------------------------------------------------
def rate(value: float) -> str:
    return f"{value / 1e6:.3g}M"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="64MiB", help="bytes of rows (default 64MiB)")
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data", help="where the data goes")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--peer-seconds", type=float, default=30.0, help="time box of a peer's epoch (0: whole epochs)")
    parser.add_argument("--only", nargs="+", choices=CONTENDERS, default=CONTENDERS, help="contenders to run")
    parser.add_argument("--task", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.task:
        task = json.loads(args.task)
        runner = {"prepare": run_prepare, "epoch": run_epoch, "orders": run_orders}[task["kind"]]
        print(json.dumps(runner(task)), flush=True)
        return

    missing = peers_missing(args.only)
    if missing:
        print(f"bench_peers: skipped, this python lacks {PEERS} ({missing}); `make bench-peers` installs them")
        return

    import zarr

    from daskshuffle import quality

    nbytes = parse_bytes(args.size)
    n_rows = nbytes // ROW_NBYTES
    name = format_bytes(nbytes).replace(" ", "")
    args.data.mkdir(parents=True, exist_ok=True)
    source = args.data / f"peers-source-{name}.zarr"
    if not (source.exists() and zarr.open_group(source, mode="r").attrs.get("n_rows") == n_rows):
        print(f"generating {source.name} ({n_rows:,} rows) ...", flush=True)
        make_source(source, n_rows)
    work = args.data / f"peers-{name}"
    load_before = os.getloadavg()[0]
    b = args.batch_size

    stores = {
        "daskshuffle": work / "daskshuffle.zarr",
        "MDS": work / "mds",
        "litdata": work / "litdata",
        _ray_peer.KIND: work / "ray",
    }
    # daskshuffle's store always: its piles are the scale the quality report measures every order at.
    needed = {"daskshuffle"} | {kind_of(contender) for contender in args.only}
    prepared: dict[str, float] = {}
    for kind in [kind for kind in stores if kind in needed]:
        shutil.rmtree(stores[kind], ignore_errors=True)
        stores[kind].parent.mkdir(parents=True, exist_ok=True)
        task = {"kind": "prepare", "contender": kind, "source": str(source), "store": str(stores[kind])}
        prepared[kind] = in_fresh_process(task)["seconds"]
        print(f"prepared {kind} in {prepared[kind]:.1f} s", flush=True)

    n_piles = zarr.open_group(stores["daskshuffle"], mode="r").attrs["daskshuffle"]["n_piles"]
    results: dict[str, dict[str, Any]] = {}
    for contender in args.only:
        kind = kind_of(contender)
        store = str(stores[kind])
        seconds = 0.0 if contender == "daskshuffle" else args.peer_seconds
        result: dict[str, Any] = {"prepare": prepared[kind], "kind": kind}
        result["disk"] = sum(os.path.getsize(path) for path in files_of(store))
        result["files"] = len(files_of(store))
        plain_read(store)  # the page cache holds the files, as for every epoch below
        result["plain"] = n_rows / min(plain_read(store) for _ in range(3))
        ids_path = str(work / f"ids-{contender.replace(' ', '-')}.npy")
        base = {"contender": contender, "store": store, "batch_size": b, "seconds": seconds}
        result["w0"] = in_fresh_process({**base, "kind": "epoch", "num_workers": None, "ids_path": ids_path})
        result["w2"] = None if kind == _ray_peer.KIND else in_fresh_process({**base, "kind": "epoch", "num_workers": 2})
        yielded = np.load(ids_path)
        orders_path = str(work / f"orders-{contender.replace(' ', '-')}.npz")
        in_fresh_process({**base, "kind": "orders", "ids_path": orders_path})
        with np.load(orders_path) as saved:
            epoch0, epoch1 = saved["epoch0"], saved["epoch1"]
        # A fresh process yields epoch 0 again: the prefix it yielded must be the order measured.
        # Ray Data yields blocks as they are ready: another run's order is not the same one.
        checked = bool(np.array_equal(yielded, epoch0[: len(yielded)]))
        result["checked"] = None if kind == _ray_peer.KIND else checked
        result["repeated"] = len(epoch0) - n_rows
        epoch0, epoch1 = first_sightings(epoch0), first_sightings(epoch1)
        result["within"] = quality.report(epoch0, batch_size=b, n_piles=n_piles, block_size=SOURCE_CHUNK_ROWS)
        result["across"] = quality.report(epoch1, batch_size=b, previous=epoch0).iloc[-1]
        results[contender] = result
        w0, w2 = result["w0"], result["w2"]
        workers = f"w=2 {rate(w2['rate'])} rows/s over {w2['rows']:,} rows" if w2 else "w=2 -"
        print(
            f"{contender}: in process {rate(w0['rate'])} rows/s over {w0['rows']:,} rows, first batch "
            f"{w0['first'] * 1000:.0f} ms; {workers}; "
            f"order checked: {result['checked']}; rows yielded twice in epoch 0: {result['repeated']}",
            flush=True,
        )

    load_after = os.getloadavg()[0]
    print(f"\ndaskshuffle: {n_piles} piles (shuffle_zarr's default for this size)")
    box = f"a peer's epoch time-boxed at {args.peer_seconds:g} s" if args.peer_seconds else "whole epochs"
    print(
        f"\n{n_rows:,} rows ({format_bytes(n_rows * ROW_NBYTES)} of x float32[{WIDTH}] + id int64), "
        f"batch_size={b}, {os.cpu_count()} cores, {box}; load average {load_before:.2f} before, "
        f"{load_after:.2f} after\n"
    )
    columns = list(results)
    print("| | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    table = {
        "preparation (wall s)": lambda r: f"{r['prepare']:.1f}",
        "size on disk": lambda r: format_bytes(r["disk"]),
        "files": lambda r: f"{r['files']:,}",
        "plain read of its files (rows/s)": lambda r: rate(r["plain"]),
        "epoch, in process (rows/s)": lambda r: rate(r["w0"]["rate"]) + ("" if r["w0"]["rows"] >= n_rows else "*"),
        "epoch, `DataLoader` with 2 workers (rows/s)": lambda r: (
            "-" if r["w2"] is None else rate(r["w2"]["rate"]) + ("" if r["w2"]["rows"] >= n_rows else "*")
        ),
        "in process / plain read": lambda r: f"{r['w0']['rate'] / r['plain']:.3f}",
        "first batch (from making the dataset)": lambda r: f"{r['w0']['first'] * 1000:.0f} ms",
        "epoch 0 uniform on daskshuffle.quality's measures": lambda r: (
            f"{int((r['within']['verdict'] == 'as uniform').sum())} of {len(r['within'])}"
        ),
        f"batch-mates in epoch 0 that share a batch again in epoch 1 (uniform: {(b - 1) / (n_rows - 1):.6f})": (
            lambda r: f"{r['across']['value']:.6f}" if r["across"]["value"] < 0.01 else f"{r['across']['value']:.3f}"
        ),
        "peak memory of the epoch loop, in process (PSS)": lambda r: format_bytes(r["w0"]["peak"]),
        "peak memory of the epoch loop, 2 workers (PSS, with the workers)": lambda r: (
            "-" if r["w2"] is None else format_bytes(r["w2"]["peak"])
        ),
    }
    for title, cell in table.items():
        print(f"| {title} | " + " | ".join(cell(results[c]) for c in columns) + " |")
    if any(r["w0"]["rows"] < n_rows or (r["w2"] and r["w2"]["rows"] < n_rows) for r in results.values()):
        print(
            f"\n* from the first {args.peer_seconds:g} s of the epoch (--peer-seconds); the quality rows use the "
            "full orders of epochs 0 and 1 (Streaming's from its planner, checked against the ids it yielded)"
        )
    unchecked = [c for c in columns if results[c]["checked"] is False]
    if unchecked:
        print(f"\nWARNING: the order measured is not the one yielded in process for {', '.join(unchecked)}")

    print("\nepoch 0, each measure against a uniform shuffle's band:")
    for contender in columns:
        print(quality.summary(results[contender]["within"], contender))
        across = results[contender]["across"]
        print(
            f"  epochs 0 -> 1: {across.metric} {across.value:.4g}, uniform {across.uniform:.4g} "
            f"[{across.low:.4g}, {across.high:.4g}]: {across.verdict}"
        )
    if unchecked:
        sys.exit(f"bench_peers: the order measured is not the one yielded for {', '.join(unchecked)}")


if __name__ == "__main__":
    main()
