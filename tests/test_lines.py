"""shuffle_lines end to end: real text files on disk, real dask graphs."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import pickle
from pathlib import Path

import dask
import numpy as np
import pytest
import zstandard
from conftest import Points, tree_digest
from scipy import stats

import daskshuffle
from daskshuffle import (
    DaskShuffleError,
    DaskShuffleTypeError,
    DaskShuffleValueError,
    PileStoreExistsError,
    SourceNotFoundError,
    shuffle_lines,
)
from daskshuffle.sources import open_text_sources
from daskshuffle.sources._text import TextFormat

COMPRESS = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
}


def lines_of(data: bytes) -> list[bytes]:
    """The lines of ``data`` with their newlines, a final one added where missing."""
    if not data:
        return []
    if not data.endswith(b"\n"):
        data += b"\n"
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


def write(path: Path, data: bytes) -> Path:
    suffix = path.suffix
    path.write_bytes(COMPRESS[suffix](data) if suffix in COMPRESS else data)
    return path


def numbered(prefix: str, n: int, *, width: int = 0) -> bytes:
    """``n`` distinct lines of varying length, JSONL-like."""
    return b"".join(
        b'{"id": "%s-%d", "text": "%s"}\n' % (prefix.encode(), i, b"x" * ((i * 7919) % 97 + width)) for i in range(n)
    )


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[list[str], list[bytes]]:
    """Many files: large, compressed (every codec), CRLF, without a final newline, empty, empty lines."""
    src = tmp_path / "src"
    src.mkdir()
    contents = {
        "a-large.jsonl": numbered("a", 400),  # ~30 kB: many blocks of SMALL_BLOCKS
        "b.jsonl.gz": numbered("b", 50),
        "c.jsonl.bz2": numbered("c", 30),
        "d.jsonl.xz": numbered("d", 20),
        "e.jsonl.zst": numbered("e", 25),
        "f-crlf.txt": b"first\r\nsecond\r\n\r\nfourth\r\n",
        "g-no-final-newline.txt": b"one\ntwo\nthree without newline",
        "h-empty.txt": b"",
        "i-empty-lines.txt": b"\n\n\nnot empty\n\n",
        "j-no-newline-at-all.txt.gz": b"single line, compressed, no newline",
    }
    paths, expected = [], []
    for name, data in contents.items():
        paths.append(str(write(src / name, data)))
        expected.extend(lines_of(data))
    return paths, expected


SMALL_BLOCKS = 1_000  # bytes: the large file is cut into ~30 blocks


def test_output_is_exactly_a_permutation_of_the_lines(corpus: tuple[list[str], list[bytes]], tmp_path: Path) -> None:
    paths, expected = corpus
    before = tree_digest(tmp_path / "src")
    source = open_text_sources(paths, header=False, block_nbytes=SMALL_BLOCKS)
    assert source.n_blocks > 30, "the large file is read in many blocks"

    result = shuffle_lines(paths, tmp_path / "out.jsonl", n_piles=5, seed=7, block_memory=SMALL_BLOCKS)

    out = (tmp_path / "out.jsonl").read_bytes()
    assert sorted(lines_of(out)) == sorted(expected)
    assert lines_of(out) != expected, "the order changed"
    assert out.count(b"\r\n") == 4, "CRLF stays CRLF"
    assert result.n_rows == len(expected) and result.n_piles == 5 and result.materialized
    assert int(result.pile_sizes.sum()) == len(expected)
    assert tree_digest(tmp_path / "src") == before, "the source is never modified"
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl", "src"], "no temporary file is left"


def test_what_a_task_carries_grows_by_eight_bytes_a_block(tmp_path: Path) -> None:
    """The format is sent with every task: it holds a line count per block, nothing more per block."""
    sizes = {}
    for n_lines in (200, 2_000):
        src = write(tmp_path / f"in-{n_lines}.jsonl", numbered("k", n_lines))
        source = open_text_sources([str(src)], header=False, block_nbytes=100)
        fmt = TextFormat(source, [source.count_block(block) for block in range(source.n_blocks)])
        assert sum(fmt.block_lengths) == n_lines
        sizes[source.n_blocks] = len(pickle.dumps(fmt))
    (few, small), (many, large) = sorted(sizes.items())
    assert many > 1_000 and (large - small) / (many - few) <= 8.5


def test_header_stays_on_top(tmp_path: Path) -> None:
    body = numbered("row", 200)
    for name in ("table.csv", "table.csv.gz"):
        first = write(tmp_path / name, b"id,text\r\n" + body)
        second = write(tmp_path / "more.csv", numbered("more", 50))
        dst = tmp_path / f"out-{name}"
        shuffle_lines([first, second], dst, n_piles=3, seed=1, header=True, block_memory=500)
        data = dst.read_bytes()
        out = lines_of(gzip.decompress(data) if name.endswith(".gz") else data)  # an output named .gz is gzip
        assert out[0] == b"id,text\r\n"
        assert sorted(out[1:]) == sorted(lines_of(body) + lines_of(numbered("more", 50)))


def test_header_of_a_file_that_is_only_a_header(tmp_path: Path) -> None:
    src = write(tmp_path / "only.csv", b"a,b,c")
    shuffle_lines(src, tmp_path / "out.csv", seed=0, header=True)
    assert (tmp_path / "out.csv").read_bytes() == b"a,b,c\n"


def test_empty_inputs_give_an_empty_file(tmp_path: Path) -> None:
    src = [write(tmp_path / "a.txt", b""), write(tmp_path / "b.txt.gz", b"")]
    result = shuffle_lines(src, tmp_path / "out.txt", seed=0)
    assert (tmp_path / "out.txt").read_bytes() == b"" and result.n_rows == 0


def test_a_compressed_file_larger_than_a_pile_is_read_in_parallel_blocks(tmp_path: Path) -> None:
    """Compressed files are decompressed once, next to the output, and then read like plain files."""
    data = numbered("z", 3_000)
    src = [write(tmp_path / "big.jsonl.zst", data), write(tmp_path / "small.jsonl.gz", b"head\n" + numbered("y", 20))]
    result = shuffle_lines(src, tmp_path / "out.jsonl", seed=0, header=True, pile_memory=40_000, block_memory=10_000)
    out = lines_of((tmp_path / "out.jsonl").read_bytes())
    assert out[0] == lines_of(data)[0], "the header is the first line of the first file"
    assert sorted(out[1:]) == sorted([*lines_of(data)[1:], b"head\n", *lines_of(numbered("y", 20))])
    assert result.n_tasks > len(data) // 10_000, "the large file was cut into blocks of block_memory"
    assert sorted(os.listdir(tmp_path)) == ["big.jsonl.zst", "out.jsonl", "small.jsonl.gz"], "the copies are removed"


def test_lines_longer_than_a_block(tmp_path: Path) -> None:
    data = b"short\n" + b"L" * 5_000 + b"\nshort again\n" + b"M" * 3_000 + b"\n" + b"tail"
    src = write(tmp_path / "long.txt", data)
    shuffle_lines(src, tmp_path / "out.txt", n_piles=2, seed=3, block_memory=700)
    assert sorted(lines_of((tmp_path / "out.txt").read_bytes())) == sorted(lines_of(data))


def test_seeds(tmp_path: Path) -> None:
    src = write(tmp_path / "in.jsonl", numbered("s", 300))
    outputs = {}
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        result = shuffle_lines(src, tmp_path / f"{name}.jsonl", n_piles=4, seed=seed, block_memory=2_000)
        assert result.seed == seed
        outputs[name] = (tmp_path / f"{name}.jsonl").read_bytes()
    assert outputs["a"] == outputs["b"], "same seed, same bytes"
    assert outputs["a"] != outputs["c"]
    drawn = shuffle_lines(src, tmp_path / "d.jsonl", n_piles=4)
    assert 0 <= drawn.seed < 2**63, "a drawn seed is reported, to reproduce the output"


@pytest.mark.cluster
def test_same_bytes_on_a_local_cluster_as_on_one_thread(tmp_path: Path, cluster_client) -> None:
    src = [write(tmp_path / "a.jsonl", numbered("a", 2_000)), write(tmp_path / "b.jsonl.gz", numbered("b", 300))]
    with dask.config.set(scheduler="sync"):
        shuffle_lines(src, tmp_path / "sync.jsonl", n_piles=6, seed=5, block_memory=10_000)
    with cluster_client.as_current():
        result = shuffle_lines(src, tmp_path / "cluster.jsonl", n_piles=6, seed=5, block_memory=10_000)
    assert (tmp_path / "cluster.jsonl").read_bytes() == (tmp_path / "sync.jsonl").read_bytes()
    assert result.n_tasks > 20


def test_auto_piles_fit_pile_memory(tmp_path: Path) -> None:
    src = write(tmp_path / "in.jsonl", numbered("p", 3_000))
    result = shuffle_lines(src, tmp_path / "out.jsonl", seed=0, pile_memory=30_000, block_memory=20_000)
    mean_line = (tmp_path / "in.jsonl").stat().st_size / 3_000
    assert result.n_piles > 1
    assert (result.pile_sizes * (mean_line + 8)).max() <= 30_000 * 1.05


@pytest.mark.slow
def test_uniform_over_all_positions(tmp_path: Path) -> None:
    """Seeded; a correct shuffle fails this less than once in 10^6 runs.

    Six lines in two files, cut into five blocks and scattered to three piles:
    over 300 seeds, each line must land on each of the six positions about
    equally often (one chi-square test per line at 1e-7: a union bound).
    """
    first = write(tmp_path / "a.txt", b"0\n1\n2\n3\n")
    second = write(tmp_path / "b.txt", b"4\n5\n")
    n_lines, n_runs = 6, 300
    table = np.zeros((n_lines, n_lines), dtype=np.int64)
    with dask.config.set(scheduler="sync"):
        for seed in range(n_runs):
            shuffle_lines([first, second], tmp_path / "out.txt", n_piles=3, seed=seed, block_memory=3, overwrite=True)
            order = [int(line) for line in (tmp_path / "out.txt").read_bytes().split()]
            table[order, np.arange(n_lines)] += 1
    threshold = stats.chi2.isf(1e-7, df=n_lines - 1)
    expected = n_runs / n_lines
    statistics = ((table - expected) ** 2 / expected).sum(axis=1)
    assert (statistics < threshold).all(), table


def test_blocks_spread_evenly_over_the_output(tmp_path: Path) -> None:
    """Seeded; a correct shuffle fails this less than once in 10^7 runs.

    20,000 lines in 10 blocks and 8 piles: the lines of every block must spread
    evenly over the output deciles (a shuffle that kept blocks or piles in
    order would not).
    """
    n_lines, n_blocks = 20_000, 10
    data = b"".join(b"%05d\n" % i for i in range(n_lines))
    src = write(tmp_path / "in.txt", data)
    shuffle_lines(src, tmp_path / "out.txt", n_piles=8, seed=2024, block_memory=len(data) // n_blocks)
    order = np.array([int(line) for line in (tmp_path / "out.txt").read_bytes().split()])
    table = np.zeros((n_blocks, 10))
    np.add.at(table, (order * n_blocks // n_lines, np.arange(n_lines) * 10 // n_lines), 1)
    assert stats.chi2_contingency(table).pvalue > 1e-7, table


def test_fsspec_urls(tmp_path: Path) -> None:
    """Non-local filesystems: parts written by each merge task, concatenated at the end."""
    import fsspec

    fs = fsspec.filesystem("memory")
    data = numbered("m", 500)
    fs.pipe("/lines-in/a.jsonl", data)
    fs.pipe("/lines-in/b.jsonl.gz", gzip.compress(b"gz\n" * 10))
    try:
        with dask.config.set(scheduler="threads"):  # the memory filesystem lives in this process
            result = shuffle_lines(
                "memory://lines-in/*", "memory://lines-out/out.jsonl", n_piles=4, seed=0, block_memory=3_000
            )
        assert sorted(lines_of(fs.cat("/lines-out/out.jsonl"))) == sorted(lines_of(data) + [b"gz\n"] * 10)
        assert result.n_rows == 510
        assert fs.ls("/lines-out", detail=False) == ["/lines-out/out.jsonl"], "no part or piece is left"
    finally:
        fs.rm(["/lines-in", "/lines-out"], recursive=True)


def test_globs_and_directories(tmp_path: Path) -> None:
    for name in ("b.txt", "a.txt", "c.log"):
        write(tmp_path / name, f"{name}\n".encode())
    shuffle_lines(str(tmp_path / "*.txt"), tmp_path / "out" / "all.txt", seed=0)
    assert sorted(lines_of((tmp_path / "out" / "all.txt").read_bytes())) == [b"a.txt\n", b"b.txt\n"]
    with pytest.raises(DaskShuffleValueError, match=r"is a directory, instead; pass a glob"):
        shuffle_lines(tmp_path, tmp_path / "x.txt")
    with pytest.raises(SourceNotFoundError, match="matches no file"):
        shuffle_lines(str(tmp_path / "*.csv"), tmp_path / "x.txt")


def test_a_source_changed_after_counting_is_an_error(tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", b"a\nb\nc\n")
    source = open_text_sources([str(src)], header=False, block_nbytes=1_000)
    fmt = TextFormat(source, [source.count_block(0)])
    src.write_bytes(b"a\nb c\n")  # the same size, one line fewer
    with pytest.raises(DaskShuffleValueError, match=r"Expected 3 lines in block 0 .* Got 2 instead; do not change"):
        fmt.read_block(0)


def test_pieces_and_partial_output_are_removed_after_a_failure(tmp_path: Path, points: Points) -> None:
    src = write(tmp_path / "in.jsonl", numbered("f", 1_000))
    partial: list[int] = []

    def second_merge_fails(count: int) -> None:
        if count == 2:
            partial.append((tmp_path / "out.jsonl.daskshuffle-partial").read_bytes().count(b"\n"))
            raise OSError("No space left on device")

    points.arm("merge", second_merge_fails)
    with dask.config.set(scheduler="sync"), pytest.raises(OSError, match="No space left"):
        shuffle_lines(src, tmp_path / "out.jsonl", n_piles=4, seed=0, block_memory=5_000)
    assert partial[0] > 0, "the failure happened while the output was being written: the first merge's lines"
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"], "no output, partial output or piece is left"


def test_a_tmp_directory_is_kept_and_only_the_pieces_in_it_removed(tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", numbered("t", 100))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "keep.txt").write_bytes(b"not ours")
    shuffle_lines(src, tmp_path / "out.txt", n_piles=3, seed=0, tmp=scratch, block_memory=1_000)
    assert os.listdir(scratch) == ["keep.txt"]
    assert sorted(lines_of((tmp_path / "out.txt").read_bytes())) == sorted(lines_of(numbered("t", 100)))


def test_a_failure_before_the_graph_runs_leaves_nothing(tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", b"a\nb\n")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(OSError):
        shuffle_lines(src, tmp_path / "out.txt", seed=0, tmp=tmp_path / "file" / "pieces")
    assert sorted(os.listdir(tmp_path)) == ["file", "in.txt"]


def test_damaged_compressed_input_fails_before_anything_is_written(tmp_path: Path) -> None:
    src = tmp_path / "in.txt.gz"
    src.write_bytes(gzip.compress(numbered("d", 100))[:-30])
    with pytest.raises(EOFError):
        shuffle_lines(src, tmp_path / "out.txt", seed=0)
    assert sorted(os.listdir(tmp_path)) == ["in.txt.gz"]


def test_existing_destination_is_kept_unless_overwrite(tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", b"a\nb\nc\n")
    dst = write(tmp_path / "out.txt", b"keep me\n")
    with pytest.raises(PileStoreExistsError, match="pass overwrite=True"):
        shuffle_lines(src, dst, seed=0)
    assert dst.read_bytes() == b"keep me\n"
    shuffle_lines(src, dst, seed=0, overwrite=True)
    assert sorted(lines_of(dst.read_bytes())) == [b"a\n", b"b\n", b"c\n"]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_piles": 0}, DaskShuffleValueError, r"Expected n_piles to be a positive integer. Got 0 instead"),
        ({"n_piles": "many"}, DaskShuffleTypeError, "n_piles"),
        ({"seed": -1}, DaskShuffleValueError, r"seed to lie in"),
        ({"header": "yes"}, DaskShuffleTypeError, r"Expected header to be True or False"),
        ({"pile_memory": "lots"}, DaskShuffleValueError, r"pile_memory to be a size"),
        ({"block_memory": 0}, DaskShuffleValueError, r"block_memory to be a positive integer"),
        ({"n_piles": 1, "pile_memory": 200}, DaskShuffleValueError, r"Expected every pile to fit pile_memory"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict, error: type, match: str) -> None:
    src = write(tmp_path / "in.txt", numbered("x", 50))
    with pytest.raises(error, match=match):
        shuffle_lines(src, tmp_path / "out.txt", **kwargs)
    assert sorted(os.listdir(tmp_path)) == ["in.txt"], "nothing is written"


def test_bad_sources_and_destinations(tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", b"a\n")
    with pytest.raises(SourceNotFoundError, match=r"missing.txt', which does not exist"):
        shuffle_lines([src, tmp_path / "missing.txt"], tmp_path / "out.txt")
    with pytest.raises(DaskShuffleValueError, match="at least one text file"):
        shuffle_lines([], tmp_path / "out.txt")
    with pytest.raises(DaskShuffleTypeError, match="Expected src to be a path, URL or glob"):
        shuffle_lines([src, 3], tmp_path / "out.txt")
    with pytest.raises(DaskShuffleValueError, match="outside the source"):
        shuffle_lines(src, src, overwrite=True)
    with pytest.raises(DaskShuffleValueError, match="is a directory"):
        shuffle_lines(src, tmp_path, overwrite=True)
    empty = write(tmp_path / "empty.csv", b"")
    with pytest.raises(DaskShuffleValueError, match="start with a header line"):
        shuffle_lines([empty, src], tmp_path / "out.txt", header=True)
    long_line = write(tmp_path / "long.txt", b"x" * 5_000 + b"\n")
    with pytest.raises(DaskShuffleValueError, match="Expected every block to fit pile_memory"):
        shuffle_lines(long_line, tmp_path / "out.txt", pile_memory=2_000)
    assert sorted(os.listdir(tmp_path)) == ["empty.csv", "in.txt", "long.txt"], "nothing is written"


def test_a_block_too_large_for_pile_memory_is_reported_with_the_numbers_compared(tmp_path: Path) -> None:
    short = write(tmp_path / "short.txt", b"1\n" * 2_050)  # blocks of 4 KiB: under 8 KiB as text, not in memory
    with pytest.raises(
        DaskShuffleValueError,
        match=r"Expected every block to fit pile_memory \(8,192 bytes; .* Got a block of 20,480 bytes in memory "
        r"\(4,096 bytes of text in 2,048 lines, plus 8 bytes a line for its offset\)",
    ):
        shuffle_lines(short, tmp_path / "out.txt", pile_memory="8KiB")


def test_errors_share_a_base_and_a_builtin(tmp_path: Path) -> None:
    with pytest.raises(DaskShuffleError):
        shuffle_lines(tmp_path / "missing.txt", tmp_path / "out.txt")
    with pytest.raises(FileNotFoundError):
        shuffle_lines(tmp_path / "missing.txt", tmp_path / "out.txt")


def test_public_and_documented() -> None:
    assert "shuffle_lines" in daskshuffle.__all__
    assert "Examples" in shuffle_lines.__doc__


def test_an_existing_file_with_glob_characters_is_read_as_that_file(tmp_path: Path) -> None:
    source = write(tmp_path / "lines[1].txt", numbered("a", 50))
    write(tmp_path / "lines1.txt", numbered("b", 500))  # what "lines[1].txt" would match as a glob
    daskshuffle.shuffle_lines(str(source), tmp_path / "out.txt", seed=0)
    assert sorted(lines_of((tmp_path / "out.txt").read_bytes())) == sorted(lines_of(numbered("a", 50)))


DECOMPRESS = {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress}


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_an_output_named_for_a_compression_is_written_in_it(tmp_path: Path, suffix: str) -> None:
    """Each file is a valid file of its compression (parts compressed by their tasks, concatenated), with every line."""
    body = numbered("c", 500)
    src = write(tmp_path / "in.jsonl", body)
    pattern = str(tmp_path / ("out-{:d}.jsonl" + suffix))
    shuffle_lines(src, pattern, n_piles=4, seed=2, n_output_files=3, block_memory=400, header=False)
    out = [lines_of(DECOMPRESS[suffix]((tmp_path / f"out-{index}.jsonl{suffix}").read_bytes())) for index in range(3)]
    assert all(out) and sorted(line for lines in out for line in lines) == sorted(lines_of(body))


def test_an_output_named_for_a_compression_it_cannot_write_is_refused(tmp_path: Path) -> None:
    src = write(tmp_path / "in.jsonl", numbered("c", 50))
    with pytest.raises(DaskShuffleValueError, match=r"out.jsonl.zip', which asks for zip, instead") as raised:
        shuffle_lines(src, tmp_path / "out.jsonl.zip", seed=0)
    assert raised.value.parameter == "dst"
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]
