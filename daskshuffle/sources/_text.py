"""Text files, one row per line: the piece files and the output files (the source is in ``_text_source``).

Pass 1 writes each block's lines in piece order to ``<block>.lines`` and their byte offsets to ``<block>.offsets``,
so the merge reads exact byte ranges and never searches for newlines again. One plain local output file is written
in place: merge tasks write at known offsets of one preallocated file. Otherwise (object storage, several files,
compression) each merge task writes its rows of each file as one *part*, and each file is its parts concatenated
at the end. With ``n_output_files``, file ``i`` holds lines ``[i * n // n_files, (i + 1) * n // n_files)`` of the
shuffled order. gzip, bzip2 and xz parts are compressed by their tasks (concatenated streams are one valid file);
zstd is compressed once per file, into one frame, because some zstd readers stop after the first frame.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import errno
import gzip
import lzma
import os
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._config import int_setting
from .._errors import Argument, DaskShuffleValueError
from .._threads import each
from ..formats import Destination, FileSource, Pieces
from ..storage import Fetches, Location, _leftovers, _own, bounded, crash_point
from ._text_source import (
    BlockCount,
    Lines,
    TextFile,
    TextSource,
    _read_range,
    concat_lines,
    line_bytes,
    line_offsets,
    lines_of,
    take_lines,
)

__all__ = ["OutputLayout", "TextFiles", "TextFormat", "parse_delimiter"]


@dataclass(frozen=True)
class OutputLayout:
    """Where each pile starts in the output, in lines and in bytes (``n_piles + 1`` each)."""

    row_offsets: NDArray[np.int64]
    byte_offsets: NDArray[np.int64]


class PieceSizes(NamedTuple):
    """The lines and bytes of a block's pieces for piles ``first, first + 1, ...``; the others hold none.

    A block of a later level holds pieces of its super-pile's piles only: its
    sizes are a few numbers, not two per pile of the whole shuffle.
    """

    first: int
    n_piles: int
    rows: NDArray[np.int64]
    nbytes: NDArray[np.int64]

    @classmethod
    def of(cls, rows: NDArray[np.int64], nbytes: NDArray[np.int64]) -> PieceSizes:
        held = np.flatnonzero(rows)
        first, stop = (int(held[0]), int(held[-1]) + 1) if len(held) else (0, 0)
        return cls(first, len(rows), rows[first:stop].astype(np.int64), nbytes[first:stop].astype(np.int64))


def _compress(data: bytes | memoryview, compression: str | None) -> bytes | memoryview:
    """``data`` as one gzip member, bzip2 or xz stream or zstd frame (a whole stream), or as it is."""
    if compression == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if compression == "bz2":
        return bz2.compress(data, compresslevel=9)
    if compression == "xz":
        return lzma.compress(data, preset=6)
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=3).compress(data)
    return data


def _partial(dst: Location) -> Location:
    """Where the text file ``dst`` is written until it is complete (each file's own)."""
    return dst.with_suffix(_leftovers.PARTIAL_SUFFIX)


class TextFiles(Destination[Lines]):
    """The text files a shuffle of lines writes: in place, or in parts concatenated at the end."""

    moves_into_place = True  # written under a temporary name, renamed into place when complete

    def __init__(
        self, paths: Sequence[Location], compression: str | None, header: bytes, n_rows: int, n_bytes: int
    ) -> None:
        #: The output files; none for the destination alone.
        self.paths = tuple(paths)
        self.compression = compression
        #: Merge tasks compress gzip parts themselves; zstd is compressed once per file, at the end.
        self.part_compression = compression if compression != "zstd" else None
        #: The first line of every file, unshuffled (a CSV header), or nothing.
        self.header = header
        #: Bytes of the whole output, header included.
        self.n_bytes = n_bytes
        n_files = max(len(self.paths), 1)
        #: The first output line of every file, and the number of lines.
        self.starts = np.arange(n_files + 1, dtype=np.int64) * n_rows // n_files

    def _in_place(self, dst: Location) -> bool:
        """Whether the output is one plain file on a local disk, written in place rather than in parts."""
        return dst.is_local and len(self.paths) <= 1 and self.compression is None

    def write_alignment(self) -> int:
        # Lines have no fixed size: every write starts at a pile boundary, whose byte offset is known.
        return 1

    def create_destination(self, dst: Location, n_rows: int, metadata: Mapping[str, Any]) -> None:
        partial = _partial(dst).path
        if not self._in_place(dst):
            _partial(dst).makedirs()
            return
        os.makedirs(os.path.dirname(partial), exist_ok=True)
        with _own.open_writer(partial, "an output being written") as file:  # never through a link placed there
            file.write(self.header)
            file.truncate(self.n_bytes)

    def write_rows(self, dst: Location, start: int, rows: Lines, piece_info: OutputLayout) -> None:
        if not self._in_place(dst):
            self._write_parts(dst, start, rows)
            return
        data = line_bytes(rows)
        offset = int(piece_info.byte_offsets[np.searchsorted(piece_info.row_offsets, start)])
        if offset + len(data) > self.n_bytes:
            raise DaskShuffleValueError(
                f"Expected the shuffled lines to total {self.n_bytes:,} bytes, as counted. Got more instead; "
                "do not change a source while it is being shuffled."
            )
        descriptor = _own.open_file(_partial(dst).path, os.O_WRONLY, "an output being written")
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(descriptor, data[written:], offset + written)
        finally:
            os.close(descriptor)

    def _write_parts(self, dst: Location, start: int, rows: Lines) -> None:
        """Write the rows that fall in each output file as one part, named by the file and its first line.

        On object storage ``shuffle.parts-at-once`` at a time: rows that span many small files wait out a few round
        trips, not one a file.
        """
        stop = start + len(rows)
        # The files whose lines overlap [start, stop): from the one holding start to the last that begins before stop.
        first = max(int(np.searchsorted(self.starts, start, side="right")) - 1, 0)
        last = min(int(np.searchsorted(self.starts, stop, side="left")), len(self.starts) - 1)
        bounds = [
            (index, max(start, int(self.starts[index])), min(stop, int(self.starts[index + 1])))
            for index in range(first, last)
        ]
        at_once = 1 if dst.is_local else int_setting("shuffle.parts-at-once")

        def write(span: tuple[int, int, int]) -> None:
            index, a, b = span
            data = line_bytes(rows.slice(a - start, b - a))
            _partial(dst).join(f"{index:09d}-{a:020d}.part").write_whole(_compress(data, self.part_compression))

        each(write, [(index, a, b) for index, a, b in bounds if a < b], at_once)

    def finalize_destination(self, dst: Location, metadata: Mapping[str, Any]) -> None:
        fs, partial = _partial(dst).fs, _partial(dst).path
        if self._in_place(dst):
            os.replace(partial, dst.path)
            return
        by_file: dict[int, list[str]] = {}
        for part in sorted(bounded(fs, "ls", partial, detail=False, what=partial)):
            by_file.setdefault(int(part.rsplit("/", 1)[-1].split("-")[0]), []).append(part)
        # On a local disk each file is written beside its parts and renamed into place. Elsewhere a new output is
        # uploaded in place (an upload makes the file only when it completes: no copy of it); one that replaces an
        # old output is written beside it too, so that a failure leaves the old output as it was.
        outputs = list(self.paths) or [dst]
        existed = each(Location.exists, outputs)
        staged = dst.is_local or any(existed)
        targets = [_partial(dst).join(f"{index:09d}.out") if staged else path for index, path in enumerate(outputs)]
        made: list[Location] = []  # the files this run put where nothing was

        def concatenate(index: int) -> None:
            self._concatenate(fs, by_file.get(index, []), targets[index])

        def move(index: int) -> None:
            target, path = targets[index], outputs[index]
            if getattr(fs, "async_impl", False):  # object storage: a copy on the server and a delete, bounded
                target.request("mv_file", path.path)
            else:
                if posixpath.dirname(path.path):
                    fs.makedirs(posixpath.dirname(path.path), exist_ok=True)
                fs.mv(target.path, path.path)
            if not existed[index]:
                made.append(path)
            crash_point("text file moved")

        try:
            # Concatenating is I/O (and zlib, zstd), which release the GIL: a few files at a time. Each holds at
            # most its file's bytes twice (parts fetched ahead, the upload's buffer). On object storage, where a
            # small file mostly waits for round trips: as many as make 64 MiB of files, up to 16.
            file_nbytes = self.n_bytes // len(outputs) + 1
            each(concatenate, range(len(outputs)), 4 if dst.is_local else min(16, max(4, (64 << 20) // file_nbytes)))
            if staged:
                each(move, range(len(outputs)))
        except BaseException:
            # All the files or none, even when interrupted: the files of a new output go again, those uploaded in place
            # included (an upload that failed as it completed may have made its file).
            each(Location.remove, targets if not staged else made)
            raise
        _partial(dst).remove()

    def _concatenate(self, fs: Any, parts: Sequence[str], target: Location) -> None:
        """One output file: the header, then its parts in order, each read with one request (a merge task wrote it);
        zstd: one stream of them all."""
        with target.writing() as file, contextlib.ExitStack() as stack:
            out = file
            if self.compression == "zstd":
                import zstandard

                compressor = zstandard.ZstdCompressor(level=3, threads=-1)
                out = stack.enter_context(compressor.stream_writer(file, closefd=False))
            if self.header or not parts:
                out.write(_compress(self.header, self.part_compression))
            for data in _in_order(fs, parts):
                out.write(data)
        crash_point("text file written")

    def discard_destination(self, dst: Location) -> None:
        _partial(dst).remove()


class TextFormat(FileSource[Lines], Pieces[Lines], TextFiles):
    """Lines of text files, shuffled into the text files ``paths`` (the destination alone by default), compressed
    with ``compression``."""

    kind = "text"

    def __init__(
        self,
        source: TextSource,
        counts: Sequence[BlockCount],
        paths: Sequence[Location] = (),
        compression: str | None = None,
    ) -> None:
        self.source = source
        self.counts: tuple[BlockCount, ...] | None = tuple(counts)
        # What a task needs to check its block against: a few bytes a block, pickled.
        self.block_lengths = tuple(count.n_lines for count in self.counts)
        n_rows, n_text = sum(self.block_lengths), sum(count.n_bytes for count in self.counts)
        TextFiles.__init__(self, paths, compression, source.header, n_rows, len(source.header) + n_text)
        # The mean line, plus its entry in the offsets buffer.
        self.row_nbytes = -(-n_text // max(n_rows, 1)) + 8
        self.source_names = source.describe()
        self.identity = []  # a text output records no metadata: no rerun compares its sources

    def __getstate__(self) -> dict[str, Any]:
        # The counts are for planning, where the shuffle is planned; tasks carry only block_lengths.
        return {**self.__dict__, "counts": None}

    def written(self) -> TextSource:
        """The output files as a source of lines (their headers among them), to read back: ``FileNotFoundError`` for
        a file not there."""
        files = []
        for path, info in zip(self.paths, each(Location.info, self.paths), strict=True):
            if info is None or info.get("type") != "file":
                raise FileNotFoundError(errno.ENOENT, "No such file, which the shuffle wrote", path.url)
            files.append(TextFile(path, size=int(info["size"]), compression=self.compression))
        return dataclasses.replace(self.source, files=tuple(files), header=b"", header_nbytes=0)

    # -- the source ----------------------------------------------------------
    def read_block(self, block: int) -> Lines:
        return self.source.counted_lines(block, self.block_lengths[block])

    def check_blocks_fit(self, pile_nbytes: int) -> None:
        """A block is read whole by one task: it must fit the memory a pile may take."""
        for block, count in enumerate(self.counts or ()):
            nbytes = count.n_bytes + 8 * count.n_lines
            if nbytes > pile_nbytes:
                raise DaskShuffleValueError(
                    (
                        "Expected every block to fit ",
                        Argument("pile_memory"),
                        f" ({pile_nbytes:,} bytes; one task reads a block whole). Got a block of {nbytes:,} bytes in "
                        f"memory ({count.n_bytes:,} bytes of text in {count.n_lines:,} lines, plus 8 bytes a line for "
                        f"its offset) in {self.source.path_of(block)!r} instead; raise ",
                        Argument("pile_memory"),
                        ", or lower ",
                        Argument("block_memory"),
                        " (a block also holds the rest of a line that runs past its end).",
                    ),
                    parameter="pile_memory",
                )

    # -- rows in memory ------------------------------------------------------
    take = staticmethod(take_lines)
    concat = staticmethod(concat_lines)

    # -- pieces --------------------------------------------------------------
    def prepare_pieces(self, tmp: Location) -> None:
        tmp.makedirs()

    def write_pieces(self, tmp: Location, block: int, rows: Lines, piece_offsets: NDArray[np.int64]) -> PieceSizes:
        """Write the lines and their offsets; return the lines and bytes of its pieces.

        The offsets (8 bytes a line) spare the merge a second search for newlines.
        """
        offsets = line_offsets(rows)
        offsets = offsets - offsets[0]
        tmp.join(f"{block}.lines").write_whole(line_bytes(rows))
        tmp.join(f"{block}.offsets").write_whole(memoryview(offsets.astype("<i8", copy=False)).cast("B"))
        return PieceSizes.of(np.diff(piece_offsets), np.diff(offsets[piece_offsets]))

    def read_pieces(self, tmp: Location, block: int, start: int, stop: int) -> Lines:
        fs, root = tmp.fs, tmp.path
        offsets = np.frombuffer(_read_range(fs, f"{root}/{block}.offsets", 8 * start, 8 * (stop + 1)), dtype="<i8")
        first, last = int(offsets[0]), int(offsets[-1])
        data = _read_range(fs, f"{root}/{block}.lines", first, last)
        return lines_of(stop - start, (offsets - first).astype(np.int64), data)

    def combine_piece_info(self, infos: Sequence[PieceSizes]) -> OutputLayout:
        n_piles = infos[0].n_piles if infos else 0
        rows, nbytes = np.zeros(n_piles, dtype=np.int64), np.zeros(n_piles, dtype=np.int64)
        for info in infos:
            span = slice(info.first, info.first + len(info.rows))
            rows[span] += info.rows
            nbytes[span] += info.nbytes
        header = len(self.source.header)
        return OutputLayout(
            row_offsets=np.concatenate([[0], np.cumsum(rows)]).astype(np.int64),
            byte_offsets=np.concatenate([[0], np.cumsum(nbytes)]).astype(np.int64) + header,
        )


def parse_delimiter(value: object) -> bytes:
    """One byte that ends a line: ``b"\\n"`` or ``b"\\0"`` for zero-terminated records, as bytes or str."""
    delimiter = value.encode("latin-1") if isinstance(value, str) and len(value) == 1 else value
    if not isinstance(delimiter, bytes) or len(delimiter) != 1:
        raise DaskShuffleValueError(
            f"Expected delimiter to be one byte, such as b'\\n' or b'\\0'. Got {value!r} instead.",
            parameter="delimiter",
        )
    return delimiter


def _in_order(fs: Any, parts: Sequence[str], ahead: int = 2) -> Iterator[bytes]:
    """The bytes of each of ``parts``, in order, one request each (within its deadline), the ``ahead`` after it
    fetched while it is written."""
    fetches = Fetches(fs)
    try:
        for index, part in enumerate(parts):
            for later in parts[index : index + ahead + 1]:
                fetches.start(later, [later], nbytes=0)  # a no-op for those started already
            fetched = fetches.take(part, part)
            assert fetched is not None  # the one request of a read started
            yield fetched.result()
    finally:
        fetches.clear()
