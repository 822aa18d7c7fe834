"""shuffle_lines(verify=True): real text files on disk and on a loopback S3, real dask graphs, and outputs damaged
between the write and the check through the library's fault point."""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Points
from test_lines import numbered, write

from daskshuffle import DaskShuffleValueError, VerificationError, shuffle_lines

#: Each case: its input files and what shuffle_lines is given besides them (the output named ``dst``).
CASES: dict[str, tuple[dict[str, bytes], dict[str, Any]]] = {
    "plain": ({"in.jsonl": numbered("p", 300)}, {"dst": "out.jsonl"}),
    "gzip in and out": ({"in.jsonl.gz": numbered("g", 300)}, {"dst": "out.jsonl.gz"}),
    "header": ({"a.csv": b"id,text\r\n" + numbered("h", 200), "b.csv": numbered("i", 50)}, {"header": True}),
    "NUL delimiter": ({"in.bin": b"".join(b"rec\n%d\0" % i for i in range(300))}, {"delimiter": b"\0"}),
    "several files": ({"in.jsonl": numbered("s", 300)}, {"dst": "out-{}.jsonl.gz", "n_output_files": 3}),
    "header in several files": (
        {"t.csv": b"id,text\n" + numbered("t", 100)},
        {"header": True, "dst": "out-{}.csv", "n_output_files": 4},
    ),
    "CRLF": ({"in.txt": b"".join(b"line %d\r\n" % i for i in range(300))}, {}),
    "final line without newline": ({"in.txt": b"one\ntwo\n\nthree\nno newline at the end"}, {}),
}


def _case(tmp_path: Path, name: str) -> tuple[list[Path], dict[str, Any]]:
    files, given = CASES[name]
    src = tmp_path / "src"
    src.mkdir()
    kwargs = {"dst": "out.txt", **given}
    kwargs["dst"] = str(tmp_path / kwargs["dst"])
    return [write(src / file, data) for file, data in files.items()], kwargs


def _outputs(kwargs: dict[str, Any]) -> list[Path]:
    n_files = kwargs.get("n_output_files")
    return [Path(kwargs["dst"].format(index)) for index in range(n_files)] if n_files else [Path(kwargs["dst"])]


def _records(data: bytes, delimiter: bytes) -> list[bytes]:
    """The records of ``data`` with their delimiters, one added to a final record that lacks it."""
    if data and not data.endswith(delimiter):
        data += delimiter
    return [record + delimiter for record in data.split(delimiter)[:-1]]


def _read(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def _rewrite(path: Path, change: Callable[[bytes], bytes]) -> None:
    """Replace the output ``path`` by ``change`` of its (decompressed) bytes, compressed again as it was."""
    data = change(_read(path))
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


@pytest.mark.parametrize("name", list(CASES))
def test_verify_passes_on_a_true_output(tmp_path: Path, name: str) -> None:
    sources, kwargs = _case(tmp_path, name)
    delimiter = kwargs.get("delimiter", b"\n")
    result = shuffle_lines(sources, n_piles=3, seed=1, block_memory=700, verify=True, **kwargs)
    expected = [line for path in sources for line in _records(_read(path), delimiter)]
    out = [_read(path) for path in _outputs(kwargs)]
    header = [expected.pop(0)] if kwargs.get("header") else []
    assert all(data.startswith(b"".join(header)) for data in out)
    got = [line for data in out for line in _records(data, delimiter)[len(header) :]]
    assert result.n_rows == len(got) > 0
    assert sorted(got) == sorted(expected)
    assert sorted(os.listdir(tmp_path)) == sorted(["src", *(path.name for path in _outputs(kwargs))])


def _change_a_byte(records: list[bytes], skip: int) -> list[bytes]:
    """The longest record (after the ``skip`` first) with its first byte changed: as many records, as many bytes."""
    index = max(range(skip, len(records)), key=lambda at: len(records[at]))
    record = records[index]
    records[index] = (b"X" if record[:1] != b"X" else b"Y") + record[1:]
    return records


def _lose_the_last_delimiter(records: list[bytes], skip: int) -> bytes:
    """The records with a longest last (not an empty line, which would go whole), without its delimiter."""
    index = max(range(skip, len(records)), key=lambda at: len(records[at]))
    return b"".join([*records[:index], *records[index + 1 :], records[index]])[:-1]


#: Damages to an output file's records (the header, if any, first): what each leaves, as the error says it.
DAMAGES: dict[str, tuple[Callable[[list[bytes], int], bytes], str]] = {
    "a byte of a line changed": (
        lambda records, skip: b"".join(_change_a_byte(records, skip)),
        r"as many lines, of other bytes \(their checksums differ\)",
    ),
    "a line lost": (lambda records, skip: b"".join(records[:-1]), r"Got \d[\d,]* lines \(1 line fewer\)"),
    "the last delimiter lost": (_lose_the_last_delimiter, r"Got [\d,]+ bytes, not the [\d,]+ written"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("name", list(CASES))
def test_an_output_damaged_after_it_is_written_is_not_trusted(
    tmp_path: Path, points: Points, name: str, damage: str
) -> None:
    sources, kwargs = _case(tmp_path, name)
    change, message = DAMAGES[damage]
    target = _outputs(kwargs)[0]

    def damaged(data: bytes) -> bytes:
        return change(_records(data, kwargs.get("delimiter", b"\n")), 1 if kwargs.get("header") else 0)

    points.arm("shuffle complete", lambda count: _rewrite(target, damaged))
    with pytest.raises(VerificationError, match=message) as caught:
        shuffle_lines(sources, n_piles=3, seed=1, block_memory=700, verify=True, **kwargs)
    assert "the output is not trusted. It is left in place as written" in str(caught.value)
    assert repr(str(target)) in str(caught.value) or "files" in str(caught.value)
    assert all(path.exists() for path in _outputs(kwargs)), "left in place, as a pile store that fails verify is"


def test_a_doubled_line_in_place_of_another_is_caught(tmp_path: Path, points: Points) -> None:
    """As many lines, of as many bytes, each a line of the input: only the multiset differs."""
    src = write(tmp_path / "in.txt", b"".join(b"line %03d\n" % i for i in range(200)))

    def double(count: int) -> None:
        records = _records((tmp_path / "out.txt").read_bytes(), b"\n")
        (tmp_path / "out.txt").write_bytes(b"".join([records[1], *records[1:]]))

    points.arm("shuffle complete", double)
    with pytest.raises(VerificationError, match=r"as many lines, of other bytes"):
        shuffle_lines(src, tmp_path / "out.txt", n_piles=3, seed=0, block_memory=500, verify=True)


def test_a_header_lost_or_moved_is_caught(tmp_path: Path, points: Points) -> None:
    sources, kwargs = _case(tmp_path, "header in several files")
    second = _outputs(kwargs)[1]

    def header_last(data: bytes) -> bytes:  # the same lines, the header no longer on top
        records = _records(data, b"\n")
        return b"".join([*records[1:], records[0]])

    points.arm("shuffle complete", lambda count: _rewrite(second, header_last))
    with pytest.raises(VerificationError, match=rf"Got {str(second)!r} without the header line b'id,text\\n' on top"):
        shuffle_lines(sources, n_piles=3, seed=1, block_memory=700, verify=True, **kwargs)


def test_lines_moved_between_output_files_are_caught(tmp_path: Path, points: Points) -> None:
    sources, kwargs = _case(tmp_path, "several files")
    first, second = _outputs(kwargs)[:2]

    def move(count: int) -> None:
        moved = _records(_read(first), b"\n")[-1]
        _rewrite(first, lambda data: data[: -len(moved)])
        _rewrite(second, lambda data: data + moved)

    points.arm("shuffle complete", move)
    with pytest.raises(
        VerificationError, match=rf"Got 300 lines \(as many lines\); {str(first)!r} holds 99 of its 100"
    ):
        shuffle_lines(sources, n_piles=3, seed=1, block_memory=700, verify=True, **kwargs)


def test_an_output_file_removed_after_it_is_written_is_caught(tmp_path: Path, points: Points) -> None:
    sources, kwargs = _case(tmp_path, "several files")
    second = _outputs(kwargs)[1]
    points.arm("shuffle complete", lambda count: second.unlink())
    with pytest.raises(VerificationError, match=rf"Got nothing at {str(second)!r}, which the shuffle wrote"):
        shuffle_lines(sources, n_piles=3, seed=1, block_memory=700, verify=True, **kwargs)


def test_a_compressed_output_that_no_longer_decompresses_is_caught(tmp_path: Path, points: Points) -> None:
    sources, kwargs = _case(tmp_path, "gzip in and out")
    target = _outputs(kwargs)[0]
    points.arm("shuffle complete", lambda count: target.write_bytes(target.read_bytes()[:-20]))
    with pytest.raises(VerificationError, match=r"a file that does not decompress \(EOFError") as caught:
        shuffle_lines(sources, n_piles=3, seed=1, block_memory=700, verify=True, **kwargs)
    assert isinstance(caught.value.__cause__, EOFError)
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl.gz", "src"], "the spool of its copy is removed"


@pytest.mark.parametrize("repeat", [False, True])
def test_verify_with_head_count_is_refused_before_anything_is_read(tmp_path: Path, repeat: bool) -> None:
    with pytest.raises(DaskShuffleValueError, match=r"Expected verify=False with head_count\. .* a sample") as caught:
        shuffle_lines(tmp_path / "missing.txt", tmp_path / "out.txt", head_count=5, repeat=repeat, verify=True)
    assert caught.value.parameter == "verify"
    src = write(tmp_path / "in.txt", numbered("n", 50))
    with pytest.raises(DaskShuffleValueError, match=r"take its first lines, which are a uniform sample too"):
        shuffle_lines(src, tmp_path / "out.txt", head_count=50, verify=True)
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def test_verify_on_a_local_cluster_reads_the_outputs_in_worker_processes(tmp_path: Path, cluster_client: Any) -> None:
    sources, kwargs = _case(tmp_path, "several files")
    with cluster_client.as_current():
        result = shuffle_lines(sources, n_piles=3, seed=1, block_memory=700, verify=True, **kwargs)
    assert result.n_rows == 300


def test_verify_on_s3_in_and_out(tmp_path: Path, s3: Any, points: Points) -> None:
    """Compressed input and outputs on object storage: the outputs read back (and decompressed) from the bucket."""
    source = s3.put(str(write(tmp_path / "in.jsonl.gz", numbered("s3", 400))), "in.jsonl.gz")
    options = {"n_piles": 2, "seed": 2, "block_memory": 10_000, "verify": True, "storage_options": s3.storage_options}
    shuffle_lines(source, s3.url("out-{}.jsonl.gz"), n_output_files=2, **options)
    fs = s3.fs
    got = [gzip.decompress(fs.cat_file(f"{s3.bucket}/out-{index}.jsonl.gz")) for index in range(2)]
    assert sorted(_records(b"".join(got), b"\n")) == sorted(_records(numbered("s3", 400), b"\n"))

    def replace_a_line(count: int) -> None:
        records = _records(gzip.decompress(fs.cat_file(f"{s3.bucket}/out-1.jsonl.gz")), b"\n")
        fs.pipe_file(f"{s3.bucket}/out-1.jsonl.gz", gzip.compress(b"".join(_change_a_byte(records, 0))))

    points.arm("shuffle complete", replace_a_line)
    with pytest.raises(VerificationError, match=r"the 2 files 's3://.*/out-0.jsonl.gz' to .* of other bytes"):
        shuffle_lines(source, s3.url("out-{}.jsonl.gz"), n_output_files=2, overwrite=True, **options)
    assert sorted(path.rsplit("/", 1)[-1] for path in fs.ls(s3.bucket, refresh=True)) == [
        "in.jsonl.gz",
        "out-0.jsonl.gz",
        "out-1.jsonl.gz",
    ], "the outputs are left in place, and nothing else"
