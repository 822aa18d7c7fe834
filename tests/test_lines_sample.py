"""shuffle_lines beyond a plain shuffle: head_count (sampling), repeat, delimiter, n_output_files and compressed outputs."""

from __future__ import annotations

import gzip
import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import zstandard
from scipy import stats

import daskshuffle.shuffle._lines
from daskshuffle import DaskShuffleTypeError, DaskShuffleValueError, PileStoreExistsError, shuffle_lines
from daskshuffle.sources._text_sample import finish_sample, keep_block_sample, order_sample, plan_sample

#: A correct implementation fails a chi-square test below with probability 1e-7.
P_VALUE = 1e-7


def numbered(n: int, prefix: bytes = b"line", end: bytes = b"\n") -> bytes:
    return b"".join(b"%s %d %s%s" % (prefix, i, b"x" * (i % 11), end) for i in range(n))


def split(data: bytes, end: bytes = b"\n") -> list[bytes]:
    return [record + end for record in data.split(end)[:-1]]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_bytes(numbered(300))
    return path


# -- head_count: a sample, not a shuffle --------------------------------------
def test_head_count_gives_distinct_input_lines_in_random_order(src: Path, tmp_path: Path) -> None:
    lines = split(src.read_bytes())
    result = shuffle_lines(src, tmp_path / "out.txt", seed=3, head_count=40, block_memory=500)
    out = split((tmp_path / "out.txt").read_bytes())
    assert len(out) == 40 == result.n_rows and len(set(out)) == 40, "40 distinct lines"
    assert set(out) <= set(lines), "all from the input"
    positions = [lines.index(line) for line in out]
    assert positions != sorted(positions), "in a random order, not the input's"

    shuffle_lines(src, tmp_path / "again.txt", seed=3, head_count=40, block_memory=500)
    assert (tmp_path / "again.txt").read_bytes() == (tmp_path / "out.txt").read_bytes(), "same seed, same sample"
    shuffle_lines(src, tmp_path / "other.txt", seed=4, head_count=40, block_memory=500)
    assert (tmp_path / "other.txt").read_bytes() != (tmp_path / "out.txt").read_bytes()


def test_head_count_zero_and_beyond_the_input(src: Path, tmp_path: Path) -> None:
    assert shuffle_lines(src, tmp_path / "none.txt", seed=0, head_count=0).n_rows == 0
    assert (tmp_path / "none.txt").read_bytes() == b""

    result = shuffle_lines(src, tmp_path / "all.txt", seed=0, head_count=10_000, block_memory=500)
    out = split((tmp_path / "all.txt").read_bytes())
    assert result.n_rows == 300 and sorted(out) == sorted(split(src.read_bytes())), "every line, once"
    shuffle_lines(src, tmp_path / "full.txt", seed=0, block_memory=500)
    assert (tmp_path / "full.txt").read_bytes() == (tmp_path / "all.txt").read_bytes(), "the full shuffle"


def test_head_count_keeps_the_header_on_top(tmp_path: Path) -> None:
    src = tmp_path / "table.csv"
    src.write_bytes(b"id,text\n" + numbered(100))
    shuffle_lines(src, tmp_path / "out.csv", seed=1, header=True, head_count=5)
    out = split((tmp_path / "out.csv").read_bytes())
    assert out[0] == b"id,text\n" and len(out) == 6 and b"id,text\n" not in out[1:]


def test_repeat_draws_with_replacement(tmp_path: Path) -> None:
    src = tmp_path / "few.txt"
    src.write_bytes(b"a\nb\nc\n")
    result = shuffle_lines(src, tmp_path / "out.txt", seed=0, head_count=200, repeat=True)
    out = split((tmp_path / "out.txt").read_bytes())
    assert result.n_rows == 200 and len(out) == 200, "more draws than lines"
    assert set(out) == {b"a\n", b"b\n", b"c\n"}, "every draw an input line; 200 draws reach all three"

    with pytest.raises(DaskShuffleValueError, match="Expected head_count with repeat=True"):
        shuffle_lines(src, tmp_path / "forever.txt", repeat=True)
    assert not (tmp_path / "forever.txt").exists()


def _ordered_samples(
    n_lines: list[int], n_sample: int, replace: bool, n_runs: int, one_pass: bool
) -> Counter[tuple[int, ...]]:
    """How often each ordered sample of line numbers comes out, over seeds, by either way of sampling."""
    starts = np.concatenate([[0], np.cumsum(n_lines)])
    blocks = [pa.array([b"%d" % i for i in range(a, b)], pa.large_binary()) for a, b in itertools.pairwise(starts)]
    seen: Counter[tuple[int, ...]] = Counter()
    for seed in range(n_runs):
        if one_pass:
            kept = [
                keep_block_sample(rows, block, n_sample, seed, replace=replace) for block, rows in enumerate(blocks)
            ]
            sample = finish_sample(kept, np.array(n_lines), n_sample, seed, replace=replace)
        else:
            plan = plan_sample(np.array(n_lines), n_sample, seed, replace=replace)
            sample = order_sample([blocks[block].take(pa.array(lines)) for block, lines in plan], seed)
        seen[tuple(int(value) for value in sample.to_pylist())] += 1
    return seen


@pytest.mark.parametrize("one_pass", [True, False], ids=["one-pass", "count-then-read"])
@pytest.mark.parametrize(
    ("n_lines", "n_sample", "replace"),
    [([2, 0, 3, 1], 2, False), ([1, 4], 3, False), ([1, 3], 2, True), ([3, 0, 2], 2, True)],
)
def test_every_ordered_sample_is_equally_likely(
    n_lines: list[int], n_sample: int, replace: bool, one_pass: bool
) -> None:
    """Across blocks of uneven sizes (and an empty one): uniform over ordered samples (seeded chi-square)."""
    n = sum(n_lines)
    outcomes = (
        list(itertools.product(range(n), repeat=n_sample))
        if replace
        else list(itertools.permutations(range(n), n_sample))
    )
    seen = _ordered_samples(n_lines, n_sample, replace, 100 * len(outcomes), one_pass)
    assert set(seen) <= set(outcomes)
    observed = [seen[outcome] for outcome in outcomes]
    assert stats.chisquare(observed).pvalue > P_VALUE, observed


def test_both_ways_give_a_sample_of_the_input(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large K reads the sampled lines after counting, instead of keeping K lines of every block."""
    lines = set(split(src.read_bytes()))
    for one_pass_lines in (10**6, 0):
        monkeypatch.setattr(daskshuffle.shuffle._lines, "ONE_PASS_LINES", one_pass_lines)
        for repeat in (False, True):
            out = tmp_path / f"out-{one_pass_lines}-{repeat}.txt"
            result = shuffle_lines(src, out, seed=0, head_count=120, repeat=repeat, block_memory=500)
            sample = split(out.read_bytes())
            assert result.n_rows == len(sample) == 120 and set(sample) <= lines
            assert repeat or len(set(sample)) == 120
        out = tmp_path / f"all-{one_pass_lines}.txt"
        assert shuffle_lines(src, out, seed=0, head_count=300, block_memory=500).n_piles >= 1
        assert sorted(split(out.read_bytes())) == sorted(lines)


def test_a_sample_of_more_lines_than_the_hypergeometric_sampler_takes() -> None:
    n_lines = np.array([6 * 10**8, 0, 7 * 10**8])
    plan = plan_sample(n_lines, 1_000, seed=0, replace=False)
    assert sum(len(lines) for _, lines in plan) == 1_000
    for block, lines in plan:
        assert len(np.unique(lines)) == len(lines) and lines.min() >= 0 and lines.max() < n_lines[block]


# -- delimiter ----------------------------------------------------------------
def test_nul_terminated_records_round_trip(tmp_path: Path) -> None:
    records = numbered(200, prefix=b"multi\nline", end=b"\0")
    src = tmp_path / "in.bin"
    src.write_bytes(records[:-1])  # the last record without its NUL gets one
    shuffle_lines(src, tmp_path / "out.bin", seed=0, delimiter=b"\0", block_memory=300, n_piles=3)
    out = (tmp_path / "out.bin").read_bytes()
    assert sorted(split(out, b"\0")) == sorted(split(records, b"\0")) and out.endswith(b"\0")
    assert out.count(b"\n") == records.count(b"\n"), "newlines are part of the records"

    shuffle_lines(src, tmp_path / "sample.bin", seed=0, delimiter="\0", head_count=7, block_memory=300)
    sample = split((tmp_path / "sample.bin").read_bytes(), b"\0")
    assert len(set(sample)) == 7 and set(sample) <= set(split(records, b"\0"))


@pytest.mark.parametrize("delimiter", [b"", b"\r\n", 10, "ab"])
def test_a_delimiter_is_one_byte(src: Path, tmp_path: Path, delimiter: object) -> None:
    with pytest.raises(DaskShuffleValueError, match="Expected delimiter to be one byte"):
        shuffle_lines(src, tmp_path / "out.txt", delimiter=delimiter)  # type: ignore[arg-type]


# -- several output files -----------------------------------------------------
def test_output_files_hold_every_line_once_in_near_equal_parts(src: Path, tmp_path: Path) -> None:
    result = shuffle_lines(src, tmp_path / "part-{:03d}.txt", seed=5, n_output_files=7, n_piles=4, block_memory=500)
    parts = [split((tmp_path / f"part-{i:03d}.txt").read_bytes()) for i in range(7)]
    assert sorted(line for part in parts for line in part) == sorted(split(src.read_bytes())), "each line once"
    assert {len(part) for part in parts} == {42, 43}, "300 lines in 7 files: 42 or 43 each"
    assert result.n_rows == 300 and result.path == str(tmp_path / "part-{:03d}.txt")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"] + [f"part-{i:03d}.txt" for i in range(7)]

    shuffle_lines(src, tmp_path / "one.txt", seed=5, n_piles=4, block_memory=500)
    assert b"".join(b"".join(part) for part in parts) == (tmp_path / "one.txt").read_bytes(), (
        "the files are the single output cut in order"
    )


def test_compressed_output_files_with_a_header(tmp_path: Path) -> None:
    src = tmp_path / "table.csv"
    src.write_bytes(b"id,text\n" + numbered(50))
    shuffle_lines(src, tmp_path / "gz-{}.csv.gz", seed=0, header=True, n_output_files=3, block_memory=400, n_piles=2)
    shuffle_lines(src, tmp_path / "zst-{}.csv.zst", seed=0, header=True, n_output_files=3, block_memory=400, n_piles=2)
    for i in range(3):
        gz = gzip.decompress((tmp_path / f"gz-{i}.csv.gz").read_bytes())
        # One frame, as every zstd reader expects (some stop after the first).
        zst = zstandard.ZstdDecompressor().decompressobj().decompress((tmp_path / f"zst-{i}.csv.zst").read_bytes())
        assert gz == zst and gz.startswith(b"id,text\n"), "every file starts with the header"
    body = [line for i in range(3) for line in split(gzip.decompress((tmp_path / f"gz-{i}.csv.gz").read_bytes()))[1:]]
    assert sorted(body) == sorted(split(numbered(50)))


def test_more_files_than_lines_and_a_sample_into_files(src: Path, tmp_path: Path) -> None:
    tiny = tmp_path / "tiny.txt"
    tiny.write_bytes(b"a\nb\n")
    shuffle_lines(tiny, tmp_path / "t{}.txt.gz", seed=0, n_output_files=4)
    assert sorted(gzip.decompress((tmp_path / f"t{i}.txt.gz").read_bytes()) for i in range(4)) == [
        b"",
        b"",
        b"a\n",
        b"b\n",
    ], "empty files are valid gzip"
    result = shuffle_lines(src, tmp_path / "s{}.txt", seed=0, head_count=10, n_output_files=3)
    sizes = [len(split((tmp_path / f"s{i}.txt").read_bytes())) for i in range(3)]
    assert result.n_rows == 10 and sizes == [3, 3, 4]


def test_output_files_are_checked_before_anything_is_written(src: Path, tmp_path: Path) -> None:
    (tmp_path / "p1.txt").write_bytes(b"keep\n")
    with pytest.raises(PileStoreExistsError, match=r"p1\.txt"):
        shuffle_lines(src, tmp_path / "p{}.txt", n_output_files=3)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "p1.txt"]
    shuffle_lines(src, tmp_path / "p{}.txt", n_output_files=3, overwrite=True, seed=0)
    assert sum(len(split((tmp_path / f"p{i}.txt").read_bytes())) for i in range(3)) == 300

    with pytest.raises(DaskShuffleValueError, match="Expected dst to name 3 different files"):
        shuffle_lines(src, tmp_path / "same.txt", n_output_files=3)
    with pytest.raises(DaskShuffleValueError, match="Expected dst to be a pattern"):
        shuffle_lines(src, tmp_path / "bad-{name}.txt", n_output_files=3)
    with pytest.raises(DaskShuffleValueError, match="Expected n_output_files to be a positive integer"):
        shuffle_lines(src, tmp_path / "z{}.txt", n_output_files=0)
    with pytest.raises(DaskShuffleTypeError, match="Expected n_output_files"):
        shuffle_lines(src, tmp_path / "z{}.txt", n_output_files="3")  # type: ignore[arg-type]


def test_output_files_on_another_filesystem() -> None:
    import dask
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/shards-in/a.txt", numbered(100))
    try:
        with dask.config.set(scheduler="threads"):  # the memory filesystem lives in this process
            shuffle_lines("memory://shards-in/a.txt", "memory://shards-out/x{}.txt.gz", seed=0, n_output_files=2)
        parts = [gzip.decompress(fs.cat(f"/shards-out/x{i}.txt.gz")) for i in range(2)]
        assert sorted(split(b"".join(parts))) == sorted(split(numbered(100)))
        assert sorted(fs.ls("/shards-out", detail=False)) == ["/shards-out/x0.txt.gz", "/shards-out/x1.txt.gz"]
    finally:
        fs.rm(["/shards-in", "/shards-out"], recursive=True)


@pytest.mark.cluster
def test_same_sample_and_files_on_a_local_cluster(src: Path, tmp_path: Path, cluster_client) -> None:
    import dask

    for name, kwargs in [("sample.txt", {"head_count": 25}), ("part-{}.txt.gz", {"n_output_files": 3, "n_piles": 2})]:
        with cluster_client.as_current():
            shuffle_lines(src, tmp_path / "cluster" / name, seed=2, block_memory=500, **kwargs)
        with dask.config.set(scheduler="sync"):
            shuffle_lines(src, tmp_path / "sync" / name, seed=2, block_memory=500, **kwargs)
    for path in sorted((tmp_path / "sync").iterdir()):
        assert (tmp_path / "cluster" / path.name).read_bytes() == path.read_bytes(), path.name
    assert len(list((tmp_path / "sync").iterdir())) == 4
