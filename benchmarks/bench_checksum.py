"""Benchmark ``verify``'s hash of variable-size values (strings, binary, text lines) against the one it replaced.

Three inputs, made here: short strings (5-20 bytes), JSONL lines (50-500 bytes) and long values (10 KiB-1 MiB),
``--nbytes`` of each. For each: MB/s of input hashed by ``_bytes_hashes``, by the previous implementation (every
byte mixed with its position, kept here for the comparison, at its own ``verify.hash-nbytes`` of 256 KiB), their
ratio, and a ``cat``-like ceiling: numpy's ``sum`` of the same bytes viewed as uint64. The best of ``--repeat``
rounds, the contenders taking turns, one core. Run ``python benchmarks/bench_checksum.py`` (``--window`` sets
``verify.hash-nbytes`` for ``_bytes_hashes``; ``--lines 60`` then times ``shuffle_lines`` of 60 MB of JSONL with
and without ``verify=True``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

import daskshuffle as ds
from daskshuffle._config import int_setting
from daskshuffle.shuffle._checksum import _GOLDEN, _bytes_hashes


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser as the previous implementation computed it (five temporaries)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def previous_bytes_hashes(offsets: NDArray[np.int64], data: NDArray[np.uint8]) -> NDArray[np.uint64]:
    """The hash this benchmark compares against: every byte mixed with its position, 8 temporaries a byte."""
    n_rows = len(offsets) - 1
    hashes = np.empty(n_rows, dtype=np.uint64)
    first = 0
    at_once = 256 * 1024  # its default, at which it ran fastest
    while first < n_rows:
        last = int(np.searchsorted(offsets, offsets[first] + at_once, side="right")) - 1
        last = min(max(last, first + 1), n_rows)
        lo, hi = int(offsets[first]), int(offsets[last])
        row_of = np.repeat(np.arange(last - first), np.diff(offsets[first : last + 1]))
        position = np.arange(lo, hi, dtype=np.int64) - offsets[first:last][row_of]
        terms = _mix((position.astype(np.uint64) << np.uint64(8)) + data[lo:hi].astype(np.uint64) + _GOLDEN)
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])
        relative = offsets[first : last + 1] - lo
        per_row = sums[relative[1:]] - sums[relative[:-1]]
        lengths = np.diff(offsets[first : last + 1]).astype(np.uint64)
        hashes[first:last] = _mix(per_row ^ _mix(lengths + _GOLDEN))
        first = last
    return hashes


def jsonl_lines(rng: np.random.Generator, n: int) -> list[bytes]:
    """JSON lines of 50-500 bytes: a few keys, numbers and words, as a training corpus has them."""
    words = [b"the", b"of", b"and", b"to", b"in", b"is", b"was", b"for", b"on", b"that", b"with", b"as", b"by", b"at"]
    lines = []
    for index in range(n):
        target = int(rng.integers(50, 501))
        text = b" ".join(words[i] for i in rng.integers(0, len(words), target // 4))
        line = b'{"id": %d, "score": %.4f, "text": "%s"}\n' % (index, rng.random(), text)
        lines.append(line[: target - 1] + b"\n" if len(line) > target else line)
    return lines


def make_input(kind: str, nbytes: int, seed: int = 0) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
    """Values of ``kind`` end to end, about ``nbytes`` in all, and their offsets."""
    rng = np.random.default_rng(seed)
    if kind == "jsonl":
        values = jsonl_lines(rng, nbytes // 275)
        lengths = np.array([len(value) for value in values])
        data = np.frombuffer(b"".join(values), dtype=np.uint8)
    else:
        low, high = (5, 21) if kind == "short" else (10 * 1024, 1024 * 1024 + 1)
        lengths = rng.integers(low, high, max(1, 2 * nbytes // (low + high)))
        data = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8)
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), data


def ceiling(offsets: NDArray[np.int64], data: NDArray[np.uint8]) -> object:
    """numpy's sum of the same bytes viewed as uint64: about what reading them costs."""
    return data[: len(data) // 8 * 8].view(np.uint64).sum()


def seconds_of(function: Callable[..., object], *args: object, **kwargs: object) -> float:
    start = time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - start


def lines_verify(megabytes: float, repeat: int) -> None:
    """``shuffle_lines`` of ``megabytes`` of JSONL with and without ``verify=True``, alternating, on the default
    (threaded) scheduler: the medians, and the input's MB per second of what verify adds."""
    with tempfile.TemporaryDirectory() as folder:
        src, dst = Path(folder) / "corpus.jsonl", Path(folder) / "out.jsonl"
        rng = np.random.default_rng(0)
        with open(src, "wb") as file:
            while file.tell() < megabytes * 1e6:
                file.write(b"".join(jsonl_lines(rng, 20_000)))
        ds.shuffle_lines(src, dst, seed=0, overwrite=True, verify=True)  # warm: page cache, imports
        times: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(repeat):
            for verify in (False, True):
                times[verify].append(seconds_of(ds.shuffle_lines, src, dst, seed=round_, overwrite=True, verify=verify))
        plain, verified = statistics.median(times[False]), statistics.median(times[True])
        size = src.stat().st_size / 1e6
        print(
            f"shuffle_lines of {size:.1f} MB of JSONL, medians of {repeat}: {plain:.2f} s, with verify=True "
            f"{verified:.2f} s; verify adds {verified - plain:.2f} s, {size / max(verified - plain, 1e-9):.0f} MB a second"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nbytes", type=int, default=64 * 2**20, help="bytes of each input (default 64 MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best counts (default 3)")
    parser.add_argument("--window", type=int, default=None, help="verify.hash-nbytes for _bytes_hashes")
    parser.add_argument("--lines", type=float, default=0, help="then shuffle_lines of this many MB, verify or not")
    parser.add_argument("--kinds", nargs="+", default=["short", "jsonl", "long"], choices=["short", "jsonl", "long"])
    args = parser.parse_args()
    if args.window:
        ds.config.set({"verify.hash-nbytes": args.window})
    print(f"load average {os.getloadavg()[0]:.2f}, verify.hash-nbytes {int_setting('verify.hash-nbytes'):,}")
    print(f"{'input':8s} {'MB':>6s} {'previous':>10s} {'now':>10s} {'ratio':>6s} {'ceiling':>10s}  (MB/s)")
    contenders = {"previous": previous_bytes_hashes, "now": _bytes_hashes, "ceiling": ceiling}
    for kind in args.kinds:
        offsets, data = make_input(kind, args.nbytes)
        seconds = {name: float("inf") for name in contenders}
        for _ in range(args.repeat):
            for name, function in contenders.items():
                seconds[name] = min(seconds[name], seconds_of(function, offsets, data))
        rate = {name: len(data) / 1e6 / value for name, value in seconds.items()}
        print(
            f"{kind:8s} {len(data) / 1e6:6.1f} {rate['previous']:10.0f} {rate['now']:10.0f} "
            f"{rate['now'] / rate['previous']:6.2f} {rate['ceiling']:10.0f}"
        )
    if args.lines:
        lines_verify(args.lines, args.repeat)


if __name__ == "__main__":
    main()
