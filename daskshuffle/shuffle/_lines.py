"""The public text shuffle: decompress what must be, count the lines of every block, plan, run the graph.

:func:`shuffle_lines` makes every check before anything is read or written, then decompresses,
counts and shuffles (or, with ``head_count``, samples: ``sources/_text_sample.py``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .._errors import Argument, DaskShuffleValueError
from .._parse import parse_bool, parse_count, parse_nbytes
from .._threads import each
from ..sources import (
    TextFormat,
    count_lines,
    open_text_output,
    open_text_sources,
    parse_delimiter,
    parse_sources,
)
from ._compute import map_tasks
from ._destination import check_destination, check_workers_reach, shuffle_locations
from ._lines_verify import count_and_sum_lines, verify_lines
from ._options import parse_shuffle_options, shared_docs
from ._run import ShuffleResult, run_shuffle

__all__ = ["shuffle_lines"]


PathLike = str | os.PathLike[str]


@shared_docs
def shuffle_lines(
    src: PathLike | Sequence[PathLike],
    dst: PathLike,
    n_piles: int | Literal["auto"] = "auto",
    *,
    header: bool = False,
    head_count: int | None = None,
    repeat: bool = False,
    delimiter: bytes | str = b"\n",
    n_output_files: int | None = None,
    seed: int | None = None,
    overwrite: bool = False,
    pile_memory: int | str = "32MiB",
    block_memory: int | str | None = None,
    tmp: str | os.PathLike[str] | None = None,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    verify: bool = False,
    levels: int | Literal["auto"] = "auto",
) -> ShuffleResult:
    """Shuffle the lines of text files into a text file, out of core, on dask: ``shuf`` for large inputs.

    The output holds exactly the input lines in a uniformly random order, like
    ``shuf`` but for inputs larger than memory. Bytes are kept as they are (CRLF
    stays CRLF); a final line without a newline gets one. With ``head_count=K``
    (``shuf -n K``), K distinct lines chosen uniformly at random are sampled in
    one pass, in a random order, and held in memory as ``shuf -n`` holds them.

    Parameters
    ----------
    src : path, URL or glob, or a list of them
        The text files, in order. Files ending in ``.gz``, ``.bz2``, ``.xz`` or
        ``.zst`` are decompressed once, into a plain copy (removed at the end), so
        that they too are read in parallel blocks.
    dst : path or URL
        The output file, or with ``n_output_files`` a pattern with one field
        for the file number, such as ``"train-{:05d}.jsonl"``. An output named
        ``*.gz``, ``*.bz2``, ``*.xz`` or ``*.zst`` (with ``zstandard``) is written
        compressed so. Renamed into place when complete.
    header : bool, default False
        Keep the first line of the first file (a CSV header) at the top of
        every output file, unshuffled.
    head_count : int, optional
        Output only this many lines, chosen uniformly at random (``shuf -n``).
    repeat : bool, default False
        With ``head_count`` (required), draw the lines with replacement:
        ``head_count`` independent uniform draws (``shuf -r -n``).
    delimiter : bytes or str, default b"\\n"
        The one byte that ends a line; ``b"\\0"`` for NUL-terminated records
        (``shuf -z``), used for counting, splitting and output alike.
    n_output_files : int, optional
        Write the output into this many files named by ``dst.format(i)``: file
        ``i`` holds lines ``[i * n // n_output_files, (i + 1) * n // n_output_files)``
        of the shuffled order.
    n_piles : int or "auto", default "auto"
        Number of piles. ``"auto"`` picks the fewest piles that fit ``pile_memory``. The
        result is exactly shuffled either way; piles only bound memory. The default is
        text's own.
    {seed, overwrite}
    pile_memory : int or str, default "32MiB"
        The largest pile allowed, in bytes or a size such as "256MiB", checked before writing.
        A task holds about twice this much: the default, text's own, keeps a worker thread near
        100 MB.
    block_memory : int or str, optional
        About how much of the source one pass-1 task reads, in bytes or a size such as "64MiB".
        Of an uncompressed file; by default 16 MiB, or half of ``pile_memory`` if that is less.
    {tmp}
        The plain copies of compressed inputs go to ``<name of dst>.daskshuffle-spool`` there.
    {progress, storage_options}
    verify : bool, default False
        Once written, prove the output files hold exactly the input's lines, in any order:
        the header on top of every file, each file's lines and bytes, and
        :func:`daskshuffle.verify`'s order-independent checksum of the lines, taken as the
        input is counted and of the output read back in parallel blocks (every byte is
        hashed twice: about 400 MB of input a second on two cores). ``VerificationError``
        if not: the output is left in place, as a pile store that fails verify is, and is
        not to be trusted. Not with ``head_count``: refused before anything is read.
    {levels}

    Returns
    -------
    ShuffleResult
        What was written: its path, rows, pile sizes and seed (the one drawn, with ``seed=None``).

    Examples
    --------
    >>> import daskshuffle
    >>> daskshuffle.shuffle_lines("corpus.jsonl", "train.jsonl", seed=0)
    <ShuffleResult shuffled copy '...train.jsonl': 1,000 rows in 1 pile ...>
    >>> daskshuffle.shuffle_lines("corpus.jsonl", "sample.jsonl", seed=0, head_count=10).n_rows
    10
    >>> result = daskshuffle.shuffle_lines("corpus.jsonl", "part-{:02d}.jsonl.gz", seed=0, n_output_files=4)
    >>> import gzip
    >>> [len(gzip.open(f"part-{i:02d}.jsonl.gz").readlines()) for i in range(4)]
    [250, 250, 250, 250]
    """
    began = time.perf_counter()
    sources = parse_sources(src)
    if block_memory is None:  # a task holds about two copies of a block (plus offsets): 16 MiB, or half a pile
        block_memory = min(16 * 2**20, max(parse_nbytes(pile_memory, "pile_memory") // 2, 1))
    options = parse_shuffle_options({**locals(), "materialize": True})  # a text file is always fully shuffled
    # Every check of the arguments and destinations runs before the first byte of input is read (counting reads it
    # all); then the sources are decompressed, their blocks counted (or sampled), and shuffled or the sample written.
    with_header = parse_bool(header, "header")
    head = parse_count(head_count, "head_count") if head_count is not None else None
    with_repeat = parse_bool(repeat, "repeat")
    _refuse_combinations(options.verify, head, with_repeat)
    line_end = parse_delimiter(delimiter)
    dst_location, tmp_location = shuffle_locations(options)
    output = open_text_output(dst_location.url, n_output_files, options.storage_options)
    source = open_text_sources(
        sources,
        header=with_header,
        block_nbytes=options.block_nbytes,
        storage_options=options.storage_options,
        delimiter=line_end,
    )
    names = source.describe()
    each(  # the output files' requests wait out their round trips together
        lambda path: check_destination(
            names, path, tmp_location, overwrite=options.overwrite, workers=False, directory=False
        ),
        output.paths,
    )
    first = output.paths[0]
    check_workers_reach(
        {"dst": first, "tmp": first.scratch("", tmp_location)}, [file.location for file in source.files]
    )
    spool = dst_location.scratch(".daskshuffle-spool", tmp_location)  # where compressed inputs are decompressed

    def run(function: Callable[..., Any], arguments: Sequence[tuple[Any, ...]], token: str) -> list[Any]:
        return map_tasks(function, arguments, token=token, progress=options.progress)

    spool.remove()
    try:
        source = source.decompressed(spool, run)
        expected, sample = None, None
        if options.verify:  # the input's side of the proof, from the one read that counts its lines
            counts, expected = count_and_sum_lines(source, run)
        else:
            counts, sample, n_tasks = count_lines(source, run, head, options.seed, replace=with_repeat)
        if sample is not None:
            output.write(sample, source.header)
            return ShuffleResult(
                path=dst_location.url,
                n_rows=len(sample),
                n_piles=1,
                seed=options.seed,
                pile_sizes=np.array([len(sample)], dtype=np.int64),
                variables=[],
                materialized=True,
                seconds=time.perf_counter() - began,
                n_tasks=n_tasks,
            )
        fmt = TextFormat(source, counts, output.paths, output.compression)
        fmt.check_blocks_fit(options.pile_nbytes)
        result = run_shuffle(fmt, dataclasses.replace(options, verify=False), variables=[])
        if expected is not None:
            spool.remove()  # the input's plain copies are read: the spool is the output's now
            verify_lines(fmt, expected, spool, run)
        return result
    finally:
        spool.remove()


def _refuse_combinations(verify: bool, head: int | None, repeat: bool) -> None:
    """Refuse the arguments that cannot go together: ``verify`` of a sample, ``repeat`` of no sample."""
    if verify and head is not None:
        raise DaskShuffleValueError(
            (
                "Expected ",
                Argument("verify", False),
                " with ",
                Argument("head_count"),
                ". Got ",
                Argument("verify", True),
                " instead; a sample is not the input's lines, and that each sampled line is one of "
                "them is not proven without reading the input again: verify a full shuffle (no ",
                Argument("head_count"),
                ") and take its first lines, which are a uniform sample too.",
            ),
            parameter="verify",
        )
    if repeat and head is None:
        raise DaskShuffleValueError(
            (
                "Expected ",
                Argument("head_count"),
                " with ",
                Argument("repeat", True),
                ". Got none instead; shuf -r without -n repeats forever, which no output file can hold: ",
                Argument("head_count", "K", passed=True),
                " for K draws with replacement.",
            ),
            parameter="head_count",
        )
