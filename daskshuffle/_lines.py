"""The public text shuffle: decompress what must be, count the lines of every block, plan, run the graph."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

from . import _paths
from ._errors import DaskShuffleTypeError, DaskShuffleValueError
from ._graph import map_tasks
from ._options import DEFAULT_LINES_PILE_MEMORY, lines_block_memory, parse_shuffle_options
from ._parse import parse_bool
from ._run import ShuffleResult, check_destination, run_shuffle
from .formats._text import TextFormat, TextSource, open_text_sources

__all__ = ["shuffle_lines"]


PathLike = str | os.PathLike[str]


def parse_sources(value: object) -> list[str]:
    """One path, URL or glob, or a non-empty list of them, as strings."""
    items: list[object] = list(value) if isinstance(value, list | tuple) else [value]
    if not items:
        raise DaskShuffleValueError("Expected src to name at least one text file. Got an empty list instead.")
    sources = []
    for item in items:
        if not isinstance(item, str | os.PathLike) or not os.fspath(item):
            raise DaskShuffleTypeError(
                f"Expected src to be a path, URL or glob, or a list of them. Got {item!r} instead."
            )
        sources.append(os.fspath(item))
    return sources


def _check_blocks_fit(fmt: TextFormat, pile_nbytes: int) -> None:
    """A block is read whole by one task: it must fit the memory a pile may take."""
    for block, count in enumerate(fmt.counts or ()):
        nbytes = count.n_bytes + 8 * count.n_lines
        if nbytes > pile_nbytes:
            path = fmt.source.files[fmt.source.block(block).file].path
            raise DaskShuffleValueError(
                f"Expected every block to fit pile_memory={pile_nbytes:,} bytes (one task reads a block whole). Got "
                f"{count.n_bytes:,} bytes in {count.n_lines:,} lines of {path!r} instead; raise pile_memory, or "
                "lower block_memory (a block also holds the rest of a line that runs past its end)."
            )


def _decompress(source: TextSource, spool: str, storage_options: dict[str, Any] | None, progress: bool) -> TextSource:
    """Decompress every compressed file into ``spool``, one task a file, and read those copies instead."""
    compressed = [index for index, file in enumerate(source.files) if file.compression is not None]
    if not compressed:
        return source
    fs, inner = _paths.filesystem(spool, storage_options)
    fs.makedirs(inner, exist_ok=True)
    paths = [f"{spool}/{index}.txt" for index in compressed]
    sizes = map_tasks(
        source.decompress,
        list(zip(compressed, paths, strict=True)),
        token=repr((source.files, spool)),
        progress=progress,
    )
    return source.decompressed(
        {index: (path, size) for index, path, size in zip(compressed, paths, sizes, strict=True)}
    )


def shuffle_lines(
    src: PathLike | Sequence[PathLike],
    dst: PathLike,
    n_piles: int | Literal["auto"] = "auto",
    *,
    seed: int | None = None,
    header: bool = False,
    overwrite: bool = False,
    pile_memory: int | str = DEFAULT_LINES_PILE_MEMORY,
    block_memory: int | str | None = None,
    tmp: PathLike | None = None,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> ShuffleResult:
    """Shuffle the lines of text files into one text file, out of core, on dask.

    The output holds exactly the input lines, in a uniformly random order
    (every permutation equally likely), like ``shuf`` but for inputs larger
    than memory: the 2-pass shuffle scatters lines to piles on disk, then
    shuffles each pile in memory. Bytes are kept as they are (nothing is
    decoded; CRLF stays CRLF); a final line without a newline gets one.

    The work runs as dask graphs on the active scheduler: the current
    ``distributed.Client`` if there is one, dask's default otherwise.

    Parameters
    ----------
    src : path, URL or glob, or a list of them
        The text files, in order. Files ending in ``.gz``, ``.bz2``, ``.xz``
        or ``.zst`` are decompressed (as fsspec infers from the name) once,
        into a plain copy next to the output (removed at the end), so that they
        too are read in parallel blocks. Large files are read in parallel.
    dst : path or URL
        The output file. Written under a temporary name and renamed into place
        when complete, so an interrupted shuffle never leaves a file there.
    n_piles : int or "auto", default "auto"
        Number of piles. ``"auto"`` picks the fewest piles that fit
        ``pile_memory``. The result is exactly shuffled either way; piles only
        bound memory.
    seed : int, optional
        Same input, seed and parameters give the same output bytes, whatever
        the cluster. ``None`` draws a seed (see ``ShuffleResult.seed``).
    header : bool, default False
        Keep the first line of the first file (a CSV header) at the top,
        unshuffled.
    overwrite : bool, default False
        Replace ``dst`` if it exists (only once every check has passed).
    pile_memory : int or str, default "32MiB"
        The largest pile allowed, checked before anything is written. A task
        holds about twice this much.
    block_memory : int or str, optional
        About how much of an uncompressed file one pass-1 task reads; by
        default 16 MiB, or half of ``pile_memory`` if that is less.
    tmp : path or URL, optional
        A directory for the pieces between the passes and the plain copies of
        compressed inputs: they go in its subdirectories
        ``<name of dst>.daskshuffle-tmp`` and ``<name of dst>.daskshuffle-spool``,
        removed at the end, also after an error. By default next to ``dst``.
    progress : bool, default False
        Show a progress bar.
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Returns
    -------
    ShuffleResult

    Examples
    --------
    >>> import daskshuffle
    >>> daskshuffle.shuffle_lines("corpus.jsonl", "train.jsonl", seed=0)
    <ShuffleResult shuffled copy 'train.jsonl': 1,000 rows in 1 pile ...>
    """
    sources = parse_sources(src)
    options = parse_shuffle_options(
        dst=dst,
        n_piles=n_piles,
        seed=seed,
        overwrite=overwrite,
        materialize=True,
        pile_memory=pile_memory,
        block_memory=lines_block_memory(block_memory, pile_memory),
        tmp=tmp,
        progress=progress,
        storage_options=storage_options,
    )
    header = parse_bool(header, "header")
    dst, tmp, progress = options.dst, options.tmp, options.progress
    spool = _paths.scratch(dst, ".daskshuffle-spool", tmp)
    fs, inner = _paths.filesystem(dst, storage_options)
    if fs.isdir(inner):
        raise DaskShuffleValueError(
            f"Expected dst to be a file. Got {dst!r}, which is a directory, instead; name a file inside it."
        )

    source: TextSource = open_text_sources(
        sources, header=header, block_nbytes=options.block_nbytes, storage_options=storage_options
    )
    # Counting reads the whole input: check the destination first.
    check_destination(source.describe(), dst, tmp, overwrite=options.overwrite, storage_options=storage_options)
    _paths.remove(spool, storage_options)
    try:
        source = _decompress(source, spool, storage_options, progress)
        counts = map_tasks(
            source.count_block,
            [(block,) for block in range(source.n_blocks)],
            token=repr((source.files, source.block_nbytes, source.header)),
            progress=progress,
        )
        fmt = TextFormat(source, counts)
        _check_blocks_fit(fmt, options.pile_nbytes)
        return run_shuffle(fmt, options, variables=[])
    finally:
        _paths.remove(spool, storage_options)
