"""Shuffled lines written to several files, or compressed: the output files of ``shuffle_lines``.

``n_output_files`` cuts the shuffled lines into that many files of near-equal
numbers of lines (they differ by one line at most): file ``i`` holds lines
``[i * n // n_files, (i + 1) * n // n_files)`` of the shuffled order, so each is
itself a uniformly shuffled, uniformly chosen part of the input. An output
named ``*.gz`` or ``*.zst`` is compressed.

Each merge task writes the part of its rows that falls in each file as one
*part*, named by the output line it starts at; the files are the parts
concatenated in order, once every part is written, then renamed into place.
For gzip each part is compressed by its task (concatenated gzip members are
one valid stream, which every gzip reader takes); zstd output is compressed as
the parts are concatenated, on all cores, into one frame, because some zstd
readers (Python's ``zstandard`` stream reader, and so fsspec) stop after the
first frame.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import posixpath
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import Argument, DaskShuffleValueError
from .._parse import parse_positive_int
from ..storage import Location, _own
from ._text import OutputLayout, TextFormat, _partial_path
from ._text_source import _READ_NBYTES, BlockCount, Lines, TextSource, line_bytes

__all__ = [
    "ShardedTextFormat",
    "TextOutput",
    "compress",
    "open_text_output",
    "output_compression",
    "parse_output_files",
]

#: Output extensions that are compressed, and how.
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd"}


def output_compression(path: str) -> str | None:
    """``"gzip"`` for ``*.gz``, ``"zstd"`` for ``*.zst`` (if zstandard is installed), else ``None``."""
    compression = next((name for suffix, name in COMPRESSIONS.items() if path.endswith(suffix)), None)
    if compression == "zstd" and importlib.util.find_spec("zstandard") is None:
        raise DaskShuffleValueError(
            f"Expected an output compression this installation writes. Got {path!r}, which asks for zstd, "
            "instead; install zstandard, or name the output .gz or without a compression suffix.",
            parameter="dst",
        )
    return compression


def compress(data: bytes | memoryview, compression: str | None) -> bytes | memoryview:
    """``data`` as one gzip member or zstd frame (a whole stream), or as it is."""
    if compression == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=3).compress(data)
    return data


def parse_output_files(dst: str, n_output_files: object) -> list[str]:
    """The output paths: ``[dst]``, or ``dst.format(i)`` for each of ``n_output_files`` files."""
    if n_output_files is None:
        return [dst]
    count = parse_positive_int(n_output_files, "n_output_files")
    try:
        paths = [dst.format(index) for index in range(count)]
    except (IndexError, KeyError, ValueError) as error:
        raise DaskShuffleValueError(
            (
                "Expected ",
                Argument("dst"),
                " to be a pattern with one field for the file number, such as 'train-{:05d}.jsonl'. "
                f"Got {dst!r} instead ({error}).",
            ),
            parameter="dst",
        ) from None
    if len(set(paths)) != count:
        raise DaskShuffleValueError(
            (
                "Expected ",
                Argument("dst"),
                f" to name {count} different files, one per number. Got {dst!r}, which does not, instead; "
                "put a field such as {:05d} in it.",
            ),
            parameter="dst",
        )
    return paths


def shard_starts(n_rows: int, n_files: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The first output line of every file, and ``n_rows``: ``n_files + 1`` near-equal steps."""
    return (np.arange(n_files + 1, dtype=np.int64) * n_rows) // n_files


def _move(fs: Any, source: str, target: str) -> None:
    parent = posixpath.dirname(target)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    fs.mv(source, target)


class ShardedTextFormat(TextFormat):
    """Lines of text files, shuffled into several files, or into a compressed one."""

    def __init__(
        self, source: TextSource, counts: Sequence[BlockCount], paths: Sequence[Location], compression: str | None
    ) -> None:
        super().__init__(source, counts)
        self.paths = tuple(paths)
        self.compression = compression
        #: Merge tasks compress gzip parts themselves; zstd is compressed once per file, at the end.
        self.part_compression = compression if compression == "gzip" else None
        self.starts = shard_starts(int(self.n_lines.sum()), len(self.paths))

    def create_destination(self, dst: Location, n_rows: int, metadata: Mapping[str, Any]) -> None:
        fs, partial = _partial_path(dst)
        fs.makedirs(partial, exist_ok=True)

    def write_rows(self, dst: Location, start: int, rows: Lines, piece_info: OutputLayout) -> None:
        fs, partial = _partial_path(dst)
        stop = start + len(rows)
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        for index in range(max(first, 0), len(self.paths)):
            a, b = max(start, int(self.starts[index])), min(stop, int(self.starts[index + 1]))
            if a >= stop:
                break
            if b > a:
                data = line_bytes(rows.slice(a - start, b - a))
                fs.pipe_file(f"{partial}/{index:09d}-{a:020d}.part", bytes(compress(data, self.part_compression)))

    def finalize_destination(self, dst: Location, metadata: Mapping[str, Any]) -> None:
        fs, partial = _partial_path(dst)
        by_file: dict[int, list[str]] = {}
        for part in sorted(fs.ls(partial, detail=False)):
            by_file.setdefault(int(part.rsplit("/", 1)[-1].split("-")[0]), []).append(part)
        targets = [f"{partial}/{index:09d}.out" for index in range(len(self.paths))]
        # Concatenating is I/O (and zlib, zstd), which release the GIL: a few files at a time.
        with ThreadPoolExecutor(max_workers=min(4, len(self.paths))) as pool:
            for done in [
                pool.submit(self._concatenate, fs, by_file.get(index, []), target)
                for index, target in enumerate(targets)
            ]:
                done.result()
        for target, path in zip(targets, self.paths, strict=True):
            _move(fs, target, path.path)
        fs.rm(partial, recursive=True)

    def _concatenate(self, fs: Any, parts: Sequence[str], target: str) -> None:
        """One output file: the header, then its parts in order."""
        with fs.open(target, "wb") as file, self._writer(file) as out:
            if self.source.header or not parts:
                out.write(compress(self.source.header, self.part_compression))
            for part in parts:
                with fs.open(part, "rb") as piece:
                    shutil.copyfileobj(piece, out, _READ_NBYTES)

    def _writer(self, file: Any) -> Any:
        """Where a file's parts are written: ``file``, or a zstd stream into it."""
        if self.compression != "zstd":
            return contextlib.nullcontext(file)
        import zstandard

        return zstandard.ZstdCompressor(level=3, threads=-1).stream_writer(file, closefd=False)


@dataclass(frozen=True)
class TextOutput:
    """The output files of ``shuffle_lines``: one, or several named by a pattern, compressed by their names."""

    paths: list[Location]
    compression: str | None
    sharded: bool

    def format(self, source: TextSource, counts: Sequence[BlockCount]) -> TextFormat:
        """The format that shuffles the lines of ``source`` (its blocks counted) into these files."""
        if self.sharded:
            return ShardedTextFormat(source, counts, self.paths, self.compression)
        return TextFormat(source, counts)

    def write(self, rows: Lines, header: bytes) -> None:
        """Write ``rows``, already in order, into these files (a sample, held in memory), each under a temporary name
        first."""
        starts = shard_starts(len(rows), len(self.paths))
        written = []
        try:
            for index, path in enumerate(self.paths):
                fs, partial = _partial_path(path)
                written.append((fs, partial, path))
                part = rows.slice(int(starts[index]), int(starts[index + 1] - starts[index]))
                fs.makedirs(posixpath.dirname(partial) or ".", exist_ok=True)
                # Locally never through a link placed at the partial name.
                with (
                    _own.open_writer(partial, "an output being written")
                    if path.is_local
                    else fs.open(partial, "wb") as file
                ):
                    file.write(compress(header + bytes(line_bytes(part)), self.compression))
        except BaseException:
            for fs, partial, _ in written:
                if fs.exists(partial):
                    fs.rm(partial)
            raise
        for fs, partial, path in written:
            _move(fs, partial, path.path)


def open_text_output(dst: str, n_output_files: object, storage_options: dict[str, Any] | None) -> TextOutput:
    """The output files for ``dst`` (a pattern with ``n_output_files``), checked: none may be a directory."""
    paths = [Location.of(path, storage_options) for path in parse_output_files(dst, n_output_files)]
    compression = output_compression(dst)
    for path in paths:
        if path.isdir():
            raise DaskShuffleValueError(
                f"Expected dst to be a file. Got {path.url!r}, which is a directory, instead; name a file inside it."
            )
    return TextOutput(paths, compression, sharded=n_output_files is not None or compression is not None)
