"""Shuffle a generated JSONL file with `daskshuffle lines`, GNU `shuf` and an expanda-style bucket shuffle.

Wall time, CPU time (user + system) and peak resident memory of each
command's whole process tree (psutil, polled every 20 ms), with ``cp`` for
scale, all in one run; CPU time is the fairer comparison on a busy machine.
Then, with ``--cap``, each again under an address-space limit per process
(``prlimit --as``) to see which still completes.

    python benchmarks/bench_lines.py --size 2GB --dir /tmp/bench-lines --cap 1GiB

The expanda-style shuffle follows expanda.shuffling: the file is cut into
chunks, the lines of each chunk are shuffled in memory, and the chunks are
written out in a random order. It is approximate: the lines of a chunk stay
together. ``daskshuffle lines`` and ``shuf`` are exact.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
from dask.utils import format_bytes, parse_bytes


def generate(path: Path, n_bytes: int, seed: int = 0) -> int:
    """JSONL lines of varying length (a long-tailed text field, mean ~128 bytes a line)."""
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ,.", dtype=np.uint8)
    pool = alphabet[rng.integers(0, len(alphabet), 2**24)].tobytes()
    written = n_lines = 0
    with open(path, "wb") as file:
        while written < n_bytes:
            lengths = np.minimum(rng.lognormal(4.0, 0.9, 100_000).astype(np.int64), 4_000)
            starts = rng.integers(0, len(pool) - 4_000, len(lengths))
            chunk = b"".join(
                b'{"id": %d, "text": "%s"}\n' % (n_lines + i, pool[start : start + length])
                for i, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True))
            )
            file.write(chunk)
            written += len(chunk)
            n_lines += len(lengths)
    return n_lines


def expanda_style(src: str, dst: str, tmp: str, chunk_nbytes: int = 4 * 2**20, seed: int = 0) -> None:
    """Cut ``src`` into chunks of whole lines, shuffle each in memory, write the chunks in a random order."""
    rng = random.Random(seed)
    spool = os.path.join(tmp, "chunks")
    extents = []
    with open(src, "rb") as source, open(spool, "wb") as out:
        while chunk := source.read(chunk_nbytes):
            chunk += source.readline()  # end at a line boundary
            lines = chunk.splitlines(keepends=True)
            rng.shuffle(lines)
            extents.append((out.tell(), len(chunk)))
            out.write(b"".join(lines))
    rng.shuffle(extents)
    with open(spool, "rb") as chunks, open(dst, "wb") as out:
        for offset, length in extents:
            chunks.seek(offset)
            out.write(chunks.read(length))
    os.remove(spool)


def cpu_seconds() -> float:
    """User + system CPU time of the waited-for children so far (grandchildren their parents waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(command: list[str]) -> tuple[float, float, int, int, str]:
    """Wall and CPU seconds, peak resident bytes of the process tree, exit status and the last line of stderr."""
    began, cpu = time.perf_counter(), cpu_seconds()
    process = psutil.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        total = 0
        try:
            for member in [process, *process.children(recursive=True)]:
                total += member.memory_info().rss
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(0.02)
    seconds = time.perf_counter() - began
    err = process.stderr.read().decode(errors="replace").strip().splitlines() if process.stderr else []
    return seconds, cpu_seconds() - cpu, peak, process.returncode, err[-1] if err else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="500MB", help="size of the generated JSONL file (default 500MB)")
    parser.add_argument("--dir", default=None, help="working directory (default: a temporary one, removed)")
    parser.add_argument("--workers", type=int, default=None, help="daskshuffle workers (default: the CLI's)")
    parser.add_argument("--cap", default=None, help="also run under prlimit --as=CAP (per process), e.g. 1GiB")
    parser.add_argument("--expanda", nargs=3, metavar=("SRC", "DST", "TMP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.expanda:
        expanda_style(*args.expanda)
        return

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-lines-"))
    root.mkdir(parents=True, exist_ok=True)
    src = root / f"input-{args.size}.jsonl"
    if not src.exists():
        began = time.perf_counter()
        n_lines = generate(src, parse_bytes(args.size))
        print(
            f"generated {src} ({format_bytes(src.stat().st_size)}, {n_lines:,} lines) in {time.perf_counter() - began:.0f} s"
        )
    size = src.stat().st_size
    workers = ["--workers", str(args.workers)] if args.workers else []
    out = root / "out.jsonl"
    commands = {
        "cp": ["cp", str(src), str(out)],
        "shuf": ["shuf", str(src), "-o", str(out)],
        "daskshuffle lines": [sys.executable, "-m", "daskshuffle", "lines", str(src), "-o", str(out), "--seed", "0",
                              "--overwrite", "--no-progress", *workers],
        "expanda-style": [sys.executable, __file__, "--expanda", str(src), str(out), str(root)],
    }  # fmt: skip
    subprocess.run(["cat", str(src)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for everyone
    print(f"\ninput: {format_bytes(size)}, {os.cpu_count()} cores, {format_bytes(psutil.virtual_memory().total)} RAM")
    print(
        f"{'command':<20} {'wall s':>8} {'CPU s':>7} {'peak RSS':>10} {'time/shuf':>10} {'CPU/shuf':>9} "
        f"{'RSS/shuf':>9} {'load before':>12}"
    )
    results = {}
    for name, command in commands.items():
        out.unlink(missing_ok=True)
        load = os.getloadavg()[0]  # the machine may be shared: say how busy it was
        seconds, cpu, peak, status, last = measure(command)
        if status != 0:
            print(f"{name:<20} failed ({status}): {last}")
            continue
        if name != "cp" and out.stat().st_size != size + (0 if src.read_bytes()[-1:] == b"\n" else 1):
            print(f"{name:<20} wrote {out.stat().st_size} bytes, expected {size}")
        results[name] = (seconds, cpu, peak)
        base = results.get("shuf")
        ratios = (
            f"{seconds / base[0]:>10.2f} {cpu / base[1]:>9.2f} {peak / base[2]:>9.2f}"
            if base
            else f"{'':>10} {'':>9} {'':>9}"
        )
        print(f"{name:<20} {seconds:>8.1f} {cpu:>7.1f} {format_bytes(peak):>10} {ratios} {load:>12.1f}")

    if args.cap:
        cap = parse_bytes(args.cap)
        print(f"\nunder prlimit --as={format_bytes(cap)} (an address-space limit on every process):")
        for name in ("shuf", "daskshuffle lines", "expanda-style"):
            out.unlink(missing_ok=True)
            seconds, _, peak, status, last = measure(["prlimit", f"--as={cap}", *commands[name]])
            verdict = f"completed in {seconds:.1f} s" if status == 0 else f"failed ({status}): {last[:100]}"
            print(f"{name:<20} {verdict}")
    out.unlink(missing_ok=True)
    if not args.dir:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
