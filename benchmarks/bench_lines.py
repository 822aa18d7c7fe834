"""Shuffle a generated JSONL file with `daskshuffle lines`, GNU `shuf` and an expanda-style bucket shuffle.

Wall time, CPU time (user + system) and peak resident memory of each
command's whole process tree (psutil, polled every 20 ms), with ``cp`` for
scale, all in one run; CPU time is the fairer comparison on a busy machine.
Then, with ``--cap``, each again under an address-space limit per process
(``prlimit --as``) to see which still completes.

    python benchmarks/bench_lines.py --size 2GB --dir /tmp/bench-lines --cap 1GiB

Two more comparisons, chosen with ``--only``: ``sample`` runs
``daskshuffle lines -n K`` against ``shuf -n K`` (``wc -l``, one pass over the
input, for scale); ``shards`` writes the shuffle into ``--n-output-files``
files, plain and ``.gz``, against the single output file (``cp`` and
single-threaded ``gzip -6`` for scale). ``--rounds N``
repeats each command and reports medians.

    python benchmarks/bench_lines.py --size 2GB --dir /tmp/bench-lines --only sample shards --rounds 3

The expanda-style shuffle follows expanda.shuffling: the file is cut into
chunks, the lines of each chunk are shuffled in memory, and the chunks are
written out in a random order. It is approximate: the lines of a chunk stay
together. ``daskshuffle lines`` and ``shuf`` are exact.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import resource
import shutil
import statistics
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


def commands_for(group: str, src: Path, out: Path, root: Path, args: argparse.Namespace) -> dict[str, list[str]]:
    """The commands of one comparison, the first of them the baseline of its ratios."""
    workers = ["--workers", str(args.workers)] if args.workers else []
    daskshuffle = [sys.executable, "-m", "daskshuffle", "lines", str(src), "--seed", "0", "--no-progress", *workers]
    shards = str(root / "out-{:05d}.jsonl")
    if group == "shuffle":
        return {
            "shuf": ["shuf", str(src), "-o", str(out)],
            "cp": ["cp", str(src), str(out)],
            "daskshuffle lines": [*daskshuffle, "-o", str(out), "--overwrite"],
            "expanda-style": [sys.executable, __file__, "--expanda", str(src), str(out), str(root)],
        }
    if group == "sample":
        k = str(args.head_count)
        return {
            f"shuf -n {k}": ["shuf", "-n", k, str(src), "-o", str(out)],
            "wc -l": ["wc", "-l", str(src)],
            f"daskshuffle lines -n {k}": [*daskshuffle, "-n", k, "-o", str(out), "--overwrite"],
        }
    n = str(args.n_output_files)
    return {
        "daskshuffle lines -o 1 file": [*daskshuffle, "-o", str(out), "--overwrite"],
        f"... --n-output-files {n}": [*daskshuffle, "-o", shards, "--n-output-files", n, "--overwrite"],
        f"... --n-output-files {n} .gz": [*daskshuffle, "-o", shards + ".gz", "--n-output-files", n, "--overwrite"],
        "cp": ["cp", str(src), str(out)],
        "gzip -6 (one core)": ["sh", "-c", f"gzip -6 -c {src} > {out}"],
    }


#: The commands whose output was wrong, with what was wrong: the run exits with status 1 if any.
FAILED: list[str] = []


def check_output(name: str, out: Path, root: Path, src: Path, args: argparse.Namespace) -> str:
    """What is wrong with the output of ``name``, or an empty string."""
    size = src.stat().st_size
    if name.startswith(("cp", "wc", "gzip")):
        return ""
    if " -n " in name:
        n_lines = out.read_bytes().count(b"\n")
        return "" if n_lines == args.head_count else f"wrote {n_lines} lines, expected {args.head_count}"
    if "--n-output-files" in name:
        files = sorted(glob.glob(str(root / "out-*.jsonl*")))
        if len(files) != args.n_output_files:
            return f"wrote {len(files)} files, expected {args.n_output_files}"
        if name.endswith(".gz"):
            return ""
        written = sum(os.path.getsize(path) for path in files)
        return "" if written == size else f"wrote {written} bytes, expected {size}"
    return "" if out.stat().st_size == size else f"wrote {out.stat().st_size} bytes, expected {size}"


def compare(group: str, src: Path, root: Path, args: argparse.Namespace) -> dict[str, list[str]]:
    """Run one comparison, ``args.rounds`` times each (interleaved), and print medians and ratios."""
    out = root / "out.jsonl"
    commands = commands_for(group, src, out, root, args)
    rounds: dict[str, list[tuple[float, float, int, float]]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, command in commands.items():
            out.unlink(missing_ok=True)
            for path in glob.glob(str(root / "out-*.jsonl*")):
                os.remove(path)
            load = os.getloadavg()[0]  # the machine may be shared: say how busy it was
            seconds, cpu, peak, status, last = measure(command)
            problem = f"failed ({status}): {last}" if status != 0 else check_output(name, out, root, src, args)
            if problem:
                print(f"{name:<32} {problem}")
                FAILED.append(f"{name}: {problem}")
                continue
            rounds[name].append((seconds, cpu, peak, load))
    base_name = next(iter(commands))
    print(f"\n{group}: medians of {args.rounds} round(s), ratios to {base_name!r}")
    print(
        f"{'command':<32} {'wall s':>8} {'CPU s':>7} {'peak RSS':>10} {'time x':>7} {'CPU x':>6} {'RSS x':>6} "
        f"{'load before':>12}"
    )
    medians = {
        name: tuple(statistics.median(values) for values in zip(*results, strict=True))
        for name, results in rounds.items()
        if results
    }
    base = medians.get(base_name)
    for name, (seconds, cpu, peak, load) in medians.items():
        ratios = (
            f"{seconds / base[0]:>7.2f} {cpu / max(base[1], 1e-3):>6.2f} {peak / base[2]:>6.2f}"
            if base
            else f"{'':>7} {'':>6} {'':>6}"
        )
        print(f"{name:<32} {seconds:>8.2f} {cpu:>7.2f} {format_bytes(int(peak)):>10} {ratios} {load:>12.1f}")
    out.unlink(missing_ok=True)
    for path in glob.glob(str(root / "out-*.jsonl*")):
        os.remove(path)
    return commands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="200MB", help="size of the generated JSONL file (default 200MB; 2GB in full)")
    parser.add_argument("--dir", default=None, help="working directory (default: a temporary one, removed)")
    parser.add_argument("--workers", type=int, default=None, help="daskshuffle workers (default: the CLI's)")
    parser.add_argument("--cap", default=None, help="also run under prlimit --as=CAP (per process), e.g. 1GiB")
    parser.add_argument(
        "--only", nargs="+", choices=("shuffle", "sample", "shards"), default=["shuffle", "sample", "shards"]
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each command; medians are reported")
    parser.add_argument("--head-count", type=int, default=1000, help="K of the sample comparison (default 1000)")
    parser.add_argument("--n-output-files", type=int, default=64, help="files of the shards comparison (default 64)")
    parser.add_argument("--expanda", nargs=3, metavar=("SRC", "DST", "TMP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.expanda:
        expanda_style(*args.expanda)
        return
    # Measure the daskshuffle of this checkout, wherever the benchmark runs from.
    checkout = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-lines-"))
    root.mkdir(parents=True, exist_ok=True)
    src = root / f"input-{args.size}.jsonl"
    if not src.exists():
        began = time.perf_counter()
        n_lines = generate(src, parse_bytes(args.size))
        print(
            f"generated {src} ({format_bytes(src.stat().st_size)}, {n_lines:,} lines) in {time.perf_counter() - began:.0f} s"
        )
    subprocess.run(["cat", str(src)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache for everyone
    print(
        f"input: {format_bytes(src.stat().st_size)}, {os.cpu_count()} cores, "
        f"{format_bytes(psutil.virtual_memory().total)} RAM"
    )
    for group in args.only:
        commands = compare(group, src, root, args)
        if args.cap and group == "shuffle":
            cap = parse_bytes(args.cap)
            out = root / "out.jsonl"
            print(f"\nunder prlimit --as={format_bytes(cap)} (an address-space limit on every process):")
            for name in ("shuf", "daskshuffle lines", "expanda-style"):
                out.unlink(missing_ok=True)
                seconds, _, _, status, last = measure(["prlimit", f"--as={cap}", *commands[name]])
                verdict = f"completed in {seconds:.1f} s" if status == 0 else f"failed ({status}): {last[:100]}"
                print(f"{name:<20} {verdict}")
            out.unlink(missing_ok=True)
    if not args.dir:
        shutil.rmtree(root)
    if FAILED:
        sys.exit("bench_lines: wrong output of " + "; ".join(FAILED))


if __name__ == "__main__":
    main()
