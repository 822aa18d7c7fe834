"""``shuffle_lines(verify=True)``: proof that the output files hold exactly the input's lines, in any order.

Both sides are summed to :func:`~daskshuffle.verify`'s order-independent checksum (``_checksum.py``), a line being
its bytes with its delimiter: the input's while its blocks are counted (a read the shuffle makes anyway), the
output's once every file is in place, read back in parallel line-aligned blocks by the source's own reader (a
compressed output decompressed first, as a compressed input is). The header, if any, must open every output file,
and is counted out there; the files' line counts and bytes are compared too.
"""

from __future__ import annotations

import gzip
import lzma
import uuid
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import Argument, VerificationError
from ..sources import TextFormat, TextSource
from ..storage import Location
from ._checksum import add_checksums, checksum

if TYPE_CHECKING:
    import pyarrow as pa

#: How the shuffle runs tasks: ``run(function, arguments, token)``, one result for each of ``arguments``.
Run = Callable[..., list[Any]]

__all__ = ["count_and_sum_lines", "verify_lines"]

#: The one variable of lines, as the checksum names it.
_LINE = ("line",)
#: What a codec raises on a damaged stream (zstd, which may not notice, is caught by the sums).
_DAMAGED = (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)


def _sum(lines: pa.LargeBinaryArray) -> dict[str, Any]:
    import pyarrow as pa

    return checksum(pa.table({"line": lines}), _LINE)


def _count_and_sum(source: TextSource, block: int) -> tuple[Any, dict[str, Any]]:
    """The lines of ``block`` counted and summed (a task)."""
    count, rows = source.read_counted(block)
    return count, _sum(rows)


def count_and_sum_lines(source: TextSource, run: Run) -> tuple[list[Any], dict[str, Any]]:
    """The counts of every block of ``source`` (as :func:`~daskshuffle.sources.count_lines` gives them) and the
    checksum of all its lines, each block read once."""
    key = ("count and sum", source.files, source.block_nbytes, source.header, source.delimiter)
    counted = run(_count_and_sum, [(source, block) for block in range(source.n_blocks)], repr(key))
    return [count for count, _ in counted], add_checksums([part for _, part in counted], _LINE)


def _sum_block(source: TextSource, block: int, header: bytes) -> tuple[int, dict[str, Any], bool]:
    """The file ``block`` is in, the checksum of its lines but a file's first where ``header`` is expected there, and
    whether it is that header (a task)."""
    rows = source.read_lines(block)
    file, start, _ = source.block(block)
    headed = False
    if header and start == 0:  # a file's first block: it holds the file's first line
        headed = rows[0].as_py() == header
        rows = rows.slice(1)
    return file, _sum(rows), headed


def verify_lines(fmt: TextFormat, expected: dict[str, Any], spool: Location, run: Run) -> None:
    """Raise :class:`VerificationError` unless the output files of ``fmt`` each start with its header and hold, in
    all, the lines ``expected`` sums (:func:`count_and_sum_lines`), as many in each file as it was given; a
    compressed output is decompressed into ``spool``."""
    try:
        written = fmt.written().decompressed(spool, run)
    except FileNotFoundError as error:
        raise _not_trusted(fmt, f"nothing at {error.filename!r}, which the shuffle wrote") from error
    except _DAMAGED as error:
        raise _not_trusted(fmt, f"a file that does not decompress ({type(error).__name__}: {error})") from error
    # A new key for every check: what a verification computes is never an earlier one's result.
    token = repr(("verify lines", written.files, uuid.uuid4().hex))
    parts = run(_sum_block, [(written, block, fmt.header) for block in range(written.n_blocks)], token)
    found_lines, headed = np.zeros(len(fmt.paths), dtype=np.int64), np.zeros(len(fmt.paths), dtype=bool)
    for file, part, first in parts:
        found_lines[file] += part["n_rows"]
        headed[file] |= first
    if fmt.header and not headed.all():
        unheaded = fmt.paths[int(np.flatnonzero(~headed)[0])].url
        raise _not_trusted(fmt, f"{unheaded!r} without the header line {fmt.header!r} on top")
    wanted = np.diff(fmt.starts)
    if (found_lines != wanted).any():
        index = int(np.flatnonzero(found_lines != wanted)[0])
        total, missing = int(found_lines.sum()), int(wanted.sum() - found_lines.sum())
        plural = "" if abs(missing) == 1 else "s"
        lines = f"{abs(missing):,} line{plural} {'fewer' if missing > 0 else 'more'}" if missing else "as many lines"
        which = f"; {fmt.paths[index].url!r} holds {int(found_lines[index]):,} of its {int(wanted[index]):,}"
        raise _not_trusted(fmt, f"{total:,} lines ({lines}){which if len(fmt.paths) > 1 else ''}")
    n_bytes = sum(file.size for file in written.files)
    wanted_bytes = len(fmt.paths) * len(fmt.header) + fmt.n_bytes - len(fmt.header)
    if n_bytes != wanted_bytes:
        raise _not_trusted(fmt, f"{n_bytes:,} bytes, not the {wanted_bytes:,} written (a final delimiter lost?)")
    if add_checksums([part for _, part, _ in parts], _LINE) != expected:
        raise _not_trusted(fmt, "as many lines, of other bytes (their checksums differ)")


def _not_trusted(fmt: TextFormat, got: str) -> VerificationError:
    """The output of ``fmt`` does not hold the input's lines: ``got`` says what it holds."""
    paths = fmt.paths
    where = repr(paths[0].url) if len(paths) == 1 else f"the {len(paths)} files {paths[0].url!r} to {paths[-1].url!r}"
    n_rows = int(fmt.starts[-1])
    return VerificationError(
        (
            f"Expected {where} to hold exactly the {n_rows:,} lines of the input, in any order. Got {got} instead; "
            "the output is not trusted. It is left in place as written, as a pile store that fails verify is: remove "
            "it, or shuffle the input again, replacing it: ",
            Argument("overwrite", True, passed=True),
            ".",
        )
    )
