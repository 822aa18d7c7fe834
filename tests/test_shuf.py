"""``daskshuffle lines`` as a drop-in for GNU ``shuf``: the behaviours of shuf's own tests that apply.

Most run the command in this process (click's runner, dask's sync scheduler);
a few run it as a process, next to ``shuf`` itself where it is installed.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import Points

from daskshuffle._cli._common import cli

SHUF = shutil.which("shuf")


def lines(*args: str | Path, stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(cli, ["lines", "--scheduler", "sync", "-q", *map(str, args)], input=stdin)


def numbers(n: int) -> bytes:
    return b"".join(b"%d\n" % i for i in range(1, n + 1))


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_bytes(numbers(100))
    return path


def test_output_is_a_permutation_on_stdout_without_o(src: Path) -> None:
    done = lines(src, "--seed", "1")
    assert done.exit_code == 0, done.output
    assert sorted(done.stdout_bytes.splitlines()) == sorted(numbers(100).splitlines())
    assert done.stdout_bytes != numbers(100), "shuffled"
    assert lines(src, "--seed", "1").stdout_bytes == done.stdout_bytes, "same seed, same output"
    assert lines(src, "--seed", "2").stdout_bytes != done.stdout_bytes

    piped = lines("--seed", "1", stdin=numbers(100))
    assert piped.exit_code == 0 and piped.stdout_bytes == done.stdout_bytes, "no IN reads standard input"


def test_head_count(src: Path) -> None:
    assert lines(src, "-n", "0").stdout_bytes == b"", "-n 0 prints nothing"
    some = lines(src, "-n", "7", "--seed", "0").stdout_bytes.splitlines()
    assert len(some) == 7 == len(set(some)) and set(some) <= set(numbers(100).splitlines())
    every = lines(src, "--head-count", "1000", "--seed", "0").stdout_bytes
    assert sorted(every.splitlines()) == sorted(numbers(100).splitlines()), "-n beyond the input prints every line"


def test_repeat_with_head_count(src: Path) -> None:
    drawn = lines(src, "-r", "-n", "500", "--seed", "0").stdout_bytes.splitlines()
    assert len(drawn) == 500 and set(drawn) <= set(numbers(100).splitlines())
    assert len(set(drawn)) < 500, "500 draws from 100 lines repeat some"
    forever = lines(src, "-r")  # of files: the library refuses, its message spelled as the options
    assert forever.exit_code == 2, forever.output
    assert "Expected --head-count with --repeat. Got none instead" in forever.output


def test_zero_terminated_round_trip(tmp_path: Path) -> None:
    records = [b"a\nb", b"c", b"d e\n", b"f"]
    (tmp_path / "in.bin").write_bytes(b"\0".join(records))  # the last without its NUL
    done = lines(tmp_path / "in.bin", "-z", "--seed", "0")
    assert done.exit_code == 0, done.output
    assert done.stdout_bytes.endswith(b"\0") and sorted(done.stdout_bytes[:-1].split(b"\0")) == sorted(records)


def test_echo_and_input_range() -> None:
    echoed = lines("-e", "a", "b b", "c", "--seed", "0")
    assert echoed.exit_code == 0 and sorted(echoed.stdout_bytes.splitlines()) == [b"a", b"b b", b"c"]
    assert lines("-e").stdout_bytes == b"", "no arguments, no lines"
    assert lines("-e", "x", "-n", "0").stdout_bytes == b""

    ranged = lines("-i", "5-14", "--seed", "3").stdout_bytes.split()
    assert sorted(map(int, ranged)) == list(range(5, 15))
    assert lines("-i", "5-4").stdout_bytes == b"", "an empty range, as shuf allows"
    big = lines("-i", "1-1000000000000", "-n", "3", "--seed", "0").stdout_bytes.split()
    assert len(set(big)) == 3 and all(1 <= int(value) <= 10**12 for value in big), "-n without making the range"

    repeated = lines("-r", "-i", "1-2", "-n", "50", "--seed", "0").stdout_bytes.split()
    assert len(repeated) == 50 and set(repeated) == {b"1", b"2"}
    zero = lines("-z", "-e", "a", "b", "--seed", "0").stdout_bytes
    assert sorted(zero.split(b"\0")) == [b"", b"a", b"b"]


def test_echo_into_a_file(tmp_path: Path) -> None:
    done = lines("-i", "1-50", "-o", tmp_path / "out.txt", "--seed", "0")
    assert done.exit_code == 0 and sorted(map(int, (tmp_path / "out.txt").read_bytes().split())) == list(range(1, 51))
    again = lines("-i", "1-50", "-o", tmp_path / "out.txt")
    assert again.exit_code == 1 and "pass --overwrite" in again.output


@pytest.mark.parametrize(
    ("suffix", "decompress"), [(".gz", gzip.decompress), (".bz2", bz2.decompress), (".xz", lzma.decompress)]
)
def test_echo_into_a_file_named_for_a_compression(
    tmp_path: Path, suffix: str, decompress: Callable[[bytes], bytes]
) -> None:
    """-e and -i write an OUT named .gz, .bz2 or .xz compressed so, as the shuffle of files does; the same seed, the same bytes."""
    out = tmp_path / f"out.txt{suffix}"
    assert lines("-i", "1-50", "-o", out, "--seed", "0").exit_code == 0
    first = out.read_bytes()
    assert sorted(map(int, decompress(first).split())) == list(range(1, 51))
    assert lines("-i", "1-50", "-o", out, "--seed", "0", "--overwrite").exit_code == 0 and out.read_bytes() == first
    refused = lines("-e", "a", "-o", tmp_path / "out.zip")
    assert refused.exit_code == 2 and "which asks for zip" in refused.output
    assert sorted(path.name for path in tmp_path.iterdir()) == [out.name]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-i", "3-1"], "Expected -i to be a range LO-HI"),
        (["-i", "a-3"], "Expected -i to be a range LO-HI"),
        (["-i", "1-3", "x"], "Expected no IN with -i"),
        (["-e", "-i", "1-3"], "Expected -e or -i. Got both"),
        (["-n", "-1", "-e", "a"], "Expected -n to be a line count >= 0"),
        (["-n", "many", "-e", "a"], "Expected -n to be a line count >= 0"),
        (["-r", "-e"], "Expected lines to repeat"),
        (["-r", "-e", "a", "-o", "never-written.txt"], "Expected -n K with -r -o OUT"),
        (["--random-source", "/dev/urandom", "-e", "a"], "Expected --seed N for a reproducible run"),
        (["--n-output-files", "2", "in.txt"], "Expected -o OUT with --n-output-files"),
        (["--verify", "-e", "a"], "Expected no --n-output-files, --header or --verify with -e or -i"),
    ],
)
def test_bad_input_is_one_line_and_status_1(args: list[str], message: str) -> None:
    done = lines(*args)
    assert done.exit_code == 1, done.output
    assert message in done.output and len(done.output.strip().splitlines()) == 1, done.output


def test_sharded_and_compressed_output(src: Path, tmp_path: Path) -> None:
    done = lines(src, "-o", tmp_path / "train-{:02d}.txt.gz", "--n-output-files", "4", "--seed", "0")
    assert done.exit_code == 0, done.output
    parts = [gzip.decompress((tmp_path / f"train-{i:02d}.txt.gz").read_bytes()).splitlines() for i in range(4)]
    assert [len(part) for part in parts] == [25] * 4
    assert sorted(line for part in parts for line in part) == sorted(numbers(100).splitlines())


def test_verify(src: Path, tmp_path: Path, points: Points) -> None:
    done = lines(src, "-o", tmp_path / "out.txt", "--verify", "--seed", "0")
    assert done.exit_code == 0, done.output
    assert sorted((tmp_path / "out.txt").read_bytes().splitlines()) == sorted(numbers(100).splitlines())
    assert lines(src, "--verify", "--seed", "0").stdout_bytes == (tmp_path / "out.txt").read_bytes(), "to stdout too"
    sample = lines(src, "-n", "3", "--verify")
    assert sample.exit_code == 2 and "Expected no --verify with --head-count. Got --verify instead" in sample.output

    points.arm("shuffle complete", lambda count: (tmp_path / "damaged.txt").write_bytes(numbers(99)))
    damaged = lines(src, "-o", tmp_path / "damaged.txt", "--verify", "--seed", "0")
    assert damaged.exit_code == 1 and len(damaged.output.strip().splitlines()) == 1, damaged.output
    assert "Got 99 lines (1 line fewer) instead; the output is not trusted" in damaged.output
    assert "replacing it: pass --overwrite." in damaged.output, "the advice spelled as the option"


def run(*args: str | Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*map(str, args)], input=stdin, capture_output=True, timeout=120)


DASKSHUFFLE = (sys.executable, "-m", "daskshuffle", "lines", "--scheduler", "sync", "-q")


@pytest.mark.slow
@pytest.mark.skipif(SHUF is None, reason="GNU shuf is not installed")
@pytest.mark.parametrize(
    ("args", "n_pool"),
    [
        (["{src}"], 100),
        (["-n", "5", "{src}"], 100),
        (["-n", "500", "{src}"], 100),
        (["-r", "-n", "300", "{src}"], 100),
        (["-z", "{zsrc}"], 30),
        (["-i", "1-30"], 30),
        (["-e", "1", "2", "3"], 3),
    ],
)
def test_same_lines_as_shuf(args: list[str], n_pool: int, src: Path, tmp_path: Path) -> None:
    """As many lines as shuf prints, from the same input, each once unless -r: only the choice and order differ."""
    zsrc = tmp_path / "in.bin"
    zsrc.write_bytes(numbers(30).replace(b"\n", b"\0"))
    args = [arg.format(src=src, zsrc=zsrc) for arg in args]
    theirs, ours = run(SHUF, *args), run(*DASKSHUFFLE, *args)
    assert theirs.returncode == ours.returncode == 0, ours.stderr
    end = b"\0" if "-z" in args else b"\n"
    pool = set(numbers(n_pool).split())
    for out in (theirs.stdout, ours.stdout):
        assert out.endswith(end)
        records = out[:-1].split(end)
        assert set(records) <= pool
        assert "-r" in args or len(set(records)) == len(records)
    assert len(ours.stdout.split(end)) == len(theirs.stdout.split(end))


@pytest.mark.slow
@pytest.mark.skipif(SHUF is None, reason="GNU shuf is not installed")
def test_bad_range_fails_as_shuf_does() -> None:
    theirs, ours = run(SHUF, "-i", "9-1"), run(*DASKSHUFFLE, "-i", "9-1")
    assert theirs.returncode == ours.returncode == 1 and ours.stderr.count(b"\n") == 1


@pytest.mark.slow
def test_repeat_forever_until_the_reader_stops() -> None:
    process = subprocess.Popen(
        [*DASKSHUFFLE, "-r", "-e", "heads", "tails"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    first = [process.stdout.readline() for _ in range(1000)]
    process.stdout.close()  # as `| head -1000` does
    assert process.wait(timeout=60) == 0 and process.stderr is not None
    assert set(first) == {b"heads\n", b"tails\n"} and b"Traceback" not in process.stderr.read()
