"""The output files of ``shuffle_lines``, named and checked, written by :class:`~._text.TextFormat`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
from fsspec.utils import infer_compression

from .._errors import Argument, DaskShuffleValueError
from .._parse import parse_positive_int
from .._threads import each
from ..storage import Location
from ._text import OutputLayout, TextFiles
from ._text_source import Lines, line_bytes

__all__ = ["open_text_output"]


#: The compressions an output is written in, as fsspec infers them from its name.
WRITTEN = ("gzip", "bz2", "xz", "zstd")


def output_compression(path: str) -> str | None:
    """The compression fsspec infers from ``path``'s name (``"zstd"`` if zstandard is installed), else ``None``.

    Examples
    --------
    >>> output_compression("out.jsonl.gz"), output_compression("out.txt.xz"), output_compression("out.txt")
    ('gzip', 'xz', None)
    """
    compression: str | None = infer_compression(path)
    if compression is not None and compression not in WRITTEN:
        raise DaskShuffleValueError(
            f"Expected an output compression daskshuffle writes: .gz, .bz2, .xz or .zst. Got {path!r}, which asks "
            f"for {compression}, instead; name the output with one of those or without a compression suffix.",
            parameter="dst",
        )
    if compression == "zstd" and compression not in fsspec.compression.compr:
        raise DaskShuffleValueError(
            f"Expected an output compression this installation writes. Got {path!r}, which asks for zstd, "
            "instead; install zstandard, or name the output .gz or without a compression suffix.",
            parameter="dst",
        )
    return compression


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


@dataclass(frozen=True)
class TextOutput:
    """The output files of ``shuffle_lines``: one, or several named by a pattern, compressed by their names."""

    paths: list[Location]
    compression: str | None

    def write(self, rows: Lines, header: bytes) -> None:
        """Write ``header``, then ``rows`` already in order, into these files: lines held in memory.

        As a shuffle writes them: each file under a partial name next to it,
        renamed into place only when whole.
        """
        n_bytes = len(header) + len(line_bytes(rows))
        files = TextFiles(self.paths, self.compression, header, len(rows), n_bytes)
        dst = self.paths[0]
        files.create_destination(dst, len(rows), {})
        try:
            layout = OutputLayout(np.array([0, len(rows)]), np.array([len(header), n_bytes]))
            files.write_rows(dst, 0, rows, layout)
            files.finalize_destination(dst, {})
        except BaseException:
            files.discard_destination(dst)
            raise


def open_text_output(dst: str, n_output_files: object, storage_options: dict[str, Any] | None) -> TextOutput:
    """The output files for ``dst`` (a pattern with ``n_output_files``), checked: none may be a directory."""
    paths = [Location.of(path, storage_options) for path in parse_output_files(dst, n_output_files)]
    compression = output_compression(dst)
    for path, isdir in zip(paths, each(Location.isdir, paths), strict=True):  # one request each, together
        if isdir:
            raise DaskShuffleValueError(
                f"Expected dst to be a file. Got {path.url!r}, which is a directory, instead; name a file inside it."
            )
    return TextOutput(paths, compression)
