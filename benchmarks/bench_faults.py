"""Faults injected into real shuffles, and what surviving them costs.

On a Zarr source (``x`` (N, 64) float32 and ``id`` (N,) int64) on local disk,
``shuffle_zarr`` into a pile store, first undisturbed (the reference bytes and
time), then with one fault each, every outcome checked against the reference:

- ``client killed at 10/50/90%``: the shuffle runs in a child process, which is
  killed (SIGKILL) once that share of its tasks has marked itself done; the same
  call then runs again in this process. Reported: the resumed run's time against
  the undisturbed one, and whether the store holds the reference's rows in the
  reference's order (each variable's values; the run id in the metadata differs
  by design from run to run).
- ``worker killed in pass 1 / in the merge``: a ``LocalCluster`` of two worker
  processes; one worker process is killed when pass 1 (or the merge) is under
  way; the nanny starts a new one and dask runs its tasks again.
- ``disk full``: ``tmp=`` on a filesystem that fills after a quarter of the
  pieces (every write counts: ``open`` and ``pipe_file``, which the pieces are
  written with): a ``StorageFullError``, and nothing left behind.
- ``corrupt chunk``: a byte of one chunk of the finished store flipped; ``verify``
  (and the loader's own checks) name it.

Exits with status 1 when any outcome is not the expected one (a store that
differs, no error where one is due, a piece or store left behind), after
printing the table. Run ``python benchmarks/bench_faults.py --help``.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import numpy as np
import zarr
from dask.utils import format_bytes, parse_bytes
from fsspec.implementations.memory import MemoryFileSystem

import daskshuffle

WIDTH = 64
ROW_NBYTES = WIDTH * 4 + 8


def make_source(path: Path, n_rows: int) -> None:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    rng = np.random.default_rng(0)
    x = group.create_array("x", shape=(n_rows, WIDTH), chunks=(4096, WIDTH), dtype="f4")
    ids = group.create_array("id", shape=(n_rows,), chunks=(4096,), dtype="i8")
    step = 65_536
    for start in range(0, n_rows, step):
        stop = min(start + step, n_rows)
        x[start:stop] = rng.standard_normal((stop - start, WIDTH), dtype=np.float32)
        ids[start:stop] = np.arange(start, stop)


def digest(path: Path, step: int = 65_536) -> str:
    """The rows of a store, in order: each variable's name, dtype, shape and values (a run's own id left out)."""
    sha = hashlib.sha256()
    group = zarr.open_group(path, mode="r")
    for name, array in sorted(group.arrays()):
        sha.update(f"{name} {array.dtype} {array.shape}".encode())
        for start in range(0, array.shape[0], step):
            sha.update(np.ascontiguousarray(array[start : start + step]).tobytes())
    return sha.hexdigest()


def n_tasks_done(dst: Path) -> int:
    done = Path(str(dst) + ".daskshuffle-tmp") / "_done"
    return len(os.listdir(done)) if done.exists() else 0


class FullDisk(MemoryFileSystem):
    """An in-memory filesystem that runs out of space after ``budget`` bytes."""

    protocol = "benchfull"
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    budget = 0
    used = 0

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        opened = super()._open(path, mode, **kwargs)
        if "w" in mode:
            write = opened.write

            def budgeted(data: bytes) -> int:
                FullDisk.used += len(data)
                if FullDisk.used > FullDisk.budget:
                    raise OSError(errno.ENOSPC, "No space left on device", path)
                return write(data)

            opened.write = budgeted
        return opened

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        FullDisk.used += len(value)
        if FullDisk.used > FullDisk.budget:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        super().pipe_file(path, value, mode=mode, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256MiB", help="Source size (default 256MiB).")
    parser.add_argument("--n-piles", type=int, default=64)
    parser.add_argument("--block-memory", default="8MiB", help="block_memory: many tasks, so that kills land mid-run")
    parser.add_argument("--dir", type=Path, default=None, help="Working directory (default: a temporary one)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    n_rows = parse_bytes(args.size) // ROW_NBYTES
    source = root / "raw.zarr"
    if not source.exists():
        make_source(source, n_rows)
    options = {"n_piles": args.n_piles, "seed": 0, "block_memory": args.block_memory}
    call = f"shuffle_zarr({str(source)!r}, DST, n_piles={args.n_piles}, seed=0, block_memory={args.block_memory!r})"
    print(f"source {format_bytes(n_rows * ROW_NBYTES)}, {n_rows:,} rows; load {os.getloadavg()[0]:.1f}", flush=True)
    rows: list[tuple[str, str, str]] = []
    failed: list[str] = []  # the faults whose outcome is not the expected one

    reference = root / "reference.zarr"
    shutil.rmtree(reference, ignore_errors=True)
    began = time.perf_counter()
    result = daskshuffle.shuffle_zarr(source, reference, **options)
    undisturbed = time.perf_counter() - began
    expected = digest(reference)
    n_tasks = result.n_tasks
    rows.append(("undisturbed", f"{undisturbed:.1f} s", "-"))

    for share in (0.1, 0.5, 0.9):
        dst = root / f"killed-{int(share * 100)}.zarr"
        shutil.rmtree(dst, ignore_errors=True)
        code = f"from daskshuffle import shuffle_zarr\nDST = {str(dst)!r}\n{call}\n"
        child = subprocess.Popen([sys.executable, "-c", code])
        # The scatter, merge and seam tasks mark themselves; the barrier and the last task do not.
        while n_tasks_done(dst) < share * (n_tasks - 2) and child.poll() is None:
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)
        child.wait()
        marked = n_tasks_done(dst)
        began = time.perf_counter()
        daskshuffle.shuffle_zarr(source, dst, **options)
        resumed = time.perf_counter() - began
        same = digest(dst) == expected
        rows.append(
            (
                f"client killed at {share:.0%} ({marked} of {n_tasks - 2} tasks done)",
                f"resumed in {resumed:.1f} s = {resumed / undisturbed:.2f}x undisturbed",
                "the reference's rows, in its order" if same else "DIFFERS",
            )
        )
        if not same:
            failed.append(rows[-1][0])
        shutil.rmtree(dst, ignore_errors=True)

    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        for phase, prefix in (("pass 1", "scatter-"), ("the merge", "merge-")):
            dst = root / f"worker-{prefix.rstrip('-')}.zarr"
            shutil.rmtree(dst, ignore_errors=True)
            pids = list(client.run(os.getpid).values())
            killed: list[int] = []

            def kill_when(
                marker: str = prefix, dst: Path = dst, pids: list[int] = pids, killed: list[int] = killed
            ) -> None:
                done = Path(str(dst) + ".daskshuffle-tmp") / "_done"
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    if done.exists() and any(name.startswith(marker) for name in os.listdir(done)):
                        os.kill(pids[0], signal.SIGKILL)
                        killed.append(pids[0])
                        return
                    time.sleep(0.002)

            killer = threading.Thread(target=kill_when)
            killer.start()
            began = time.perf_counter()
            with client.as_current():
                daskshuffle.shuffle_zarr(source, dst, **options)
            seconds = time.perf_counter() - began
            killer.join()
            same = digest(dst) == expected
            rows.append(
                (
                    f"worker killed in {phase}" + ("" if killed else " (the run ended first)"),
                    f"{seconds:.1f} s on the cluster",
                    "the reference's rows, in its order" if same else "DIFFERS",
                )
            )
            if not same:
                failed.append(rows[-1][0])
            shutil.rmtree(dst, ignore_errors=True)

    fsspec.register_implementation("benchfull", FullDisk, clobber=True)
    FullDisk.budget, FullDisk.used = n_rows * ROW_NBYTES // 4, 0
    dst = root / "full.zarr"
    try:
        daskshuffle.shuffle_zarr(source, dst, tmp="benchfull://scratch", **options)
        outcome = f"no error, {format_bytes(FullDisk.used)} written (UNEXPECTED)"
        failed.append("disk full")
    except daskshuffle.StorageFullError:
        left = [path for path in FullDisk.store if path.endswith(".bin")]
        outcome = f"StorageFullError; {len(left)} pieces and {'a' if dst.exists() else 'no'} store left"
        if left or dst.exists():
            failed.append("disk full")
    rows.append(("disk full after a quarter of the pieces", "-", outcome))

    corrupt = root / "corrupt.zarr"
    shutil.copytree(reference, corrupt, dirs_exist_ok=True)
    chunk = next(path for path in sorted((corrupt / "x" / "c").rglob("*")) if path.is_file())
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    began = time.perf_counter()
    try:
        daskshuffle.verify(corrupt, source)
        found = "not found (UNEXPECTED)"
        failed.append("corrupt chunk")
    except daskshuffle.CorruptPileStoreError as error:
        found = f"CorruptPileStoreError: {str(error)[:90]}..."
    rows.append(("a flipped byte in one chunk", f"verify {time.perf_counter() - began:.1f} s", found))
    began = time.perf_counter()
    daskshuffle.verify(reference, source)
    verified = time.perf_counter() - began
    rows.append(
        ("verify of the undisturbed store", f"{verified:.1f} s = {verified / undisturbed:.2f}x the shuffle", "equal")
    )

    print(f"\nload after {os.getloadavg()[0]:.1f}\n")
    print("| fault | time | outcome |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    if failed:
        sys.exit(f"bench_faults: unexpected outcome of {', '.join(failed)}")


if __name__ == "__main__":
    main()
