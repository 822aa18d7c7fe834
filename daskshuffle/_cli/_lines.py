"""`daskshuffle lines`: shuf for files larger than memory."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

import click

from ..sources import open_text_output
from ._common import STDIO, Option, cli, reported, session, summary
from ._options import STORAGE_OPTIONS, cluster_options, positive_option, shuffle_option

#: ``shuffle_lines``' own defaults, where they differ from the other shuffles'.
TEXT_DEFAULTS = {"n_piles": "auto", "pile_memory": "32MiB", "block_memory": None}

EXAMPLES_LINES = """\b
Examples:
  daskshuffle lines big.jsonl --seed 0 > shuffled.jsonl
  daskshuffle lines big.jsonl -n 1000 --seed 0              # like shuf -n: 1000 lines, sampled
  daskshuffle lines 'corpus/*.txt.gz' extra.txt -o train.txt --workers 4 --memory-limit 2GiB
  daskshuffle lines big.jsonl -o 'train-{:05d}.jsonl.gz' --n-output-files 64
  daskshuffle lines table.csv -o shuffled.csv --header
  find . -print0 | daskshuffle lines -z | xargs -0 ls -d
  daskshuffle lines -e heads tails -r -n 10 ; daskshuffle lines -i 1-100 -n 5
"""

#: -e and -i lines are written in batches of this many.
_ECHO_BATCH = 2**16


def _head_count(value: str | None) -> int | None:
    """``-n K`` as shuf reads it: a count >= 0 (a bad one exits with status 1, as shuf's does)."""
    if value is None:
        return None
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise click.ClickException(f"Expected -n to be a line count >= 0. Got {value!r} instead.")
    return count


@cli.command(epilog=EXAMPLES_LINES, short_help="Shuffle the lines of text files, exactly, out of core (shuf).")
@click.argument("inputs", nargs=-1, metavar="[IN]...")
@click.option(
    "-o",
    "--output",
    cls=Option,
    argument="dst",
    metavar="OUT",
    help="The output file, or - for standard output.  [default: -]",
)
@click.option("-n", "--head-count", metavar="K", help="Output at most K lines, chosen uniformly at random.")
@click.option("-r", "--repeat", is_flag=True, help="With -n K: K lines drawn with replacement.")
@click.option("-z", "--zero-terminated", is_flag=True, help="Lines end in NUL, not newline.")
@click.option("-e", "--echo", is_flag=True, help="Shuffle the arguments IN... as lines (in memory).")
@click.option("-i", "--input-range", metavar="LO-HI", help="Shuffle the numbers LO to HI (in memory).")
@click.option("--random-source", metavar="FILE", hidden=True)
@shuffle_option("seed", "Same input and seed give the same output.  [default: drawn and reported]")
@positive_option(
    "--n-output-files",
    "Write N files of near-equal line counts, named by OUT with a field such as 'train-{:05d}.jsonl'.",
    metavar="N",
)
@shuffle_option("n_piles", defaults=TEXT_DEFAULTS)
@click.option("--header", is_flag=True, help="Keep the first line of the first file at the top.")
@shuffle_option("overwrite", "Replace OUT if it exists.")
@shuffle_option("verify", "Then prove OUT holds exactly the lines of IN (not with -n).")
@shuffle_option("tmp", "Where pieces (and a spooled stdin) go.  [default: next to OUT]")
@shuffle_option("pile_memory", defaults=TEXT_DEFAULTS)
@shuffle_option(
    "block_memory",
    "Bytes of input one task reads.  [default: 16MiB, or half of --pile-memory if less]",
    TEXT_DEFAULTS,
)
@STORAGE_OPTIONS
@cluster_options
def lines(
    inputs: tuple[str, ...],
    output: str | None,
    head_count: str | None,
    repeat: bool,
    zero_terminated: bool,
    echo: bool,
    input_range: str | None,
    random_source: str | None,
    seed: int | None,
    n_output_files: int | None,
    n_piles: int | Literal["auto"],
    header: bool,
    overwrite: bool,
    verify: bool,
    tmp: str | None,
    pile_memory: str,
    block_memory: str | None,
    storage_options: dict[str, Any] | None,
    progress: bool | None,
    quiet: bool,
    debug: bool,
    **cluster: Any,
) -> None:
    """Shuffle the lines of text files (IN..., - or none for stdin) to OUT: exactly, like shuf, but out of core.

    Files ending in .gz, .bz2, .xz or .zst are decompressed; an OUT ending in
    .gz, .bz2, .xz or .zst is compressed. Bytes are kept as they are; a final line
    without a newline gets one. -n K samples K lines without shuffling the
    rest. -r without -n repeats forever, with -e or -i to standard output only.
    """
    if random_source is not None:
        raise click.ClickException(
            "Expected --seed N for a reproducible run. Got --random-source instead, which is shuf's way; "
            "daskshuffle draws from --seed (the same input and seed give the same output)."
        )
    count = _head_count(head_count)
    delimiter = b"\0" if zero_terminated else b"\n"
    output = output or STDIO
    if echo or input_range is not None:
        items = _echo_items(inputs, echo, input_range, n_output_files, header or verify)
        with reported(debug):
            _shuffle_in_memory(items, count, repeat, seed, delimiter, output, overwrite, quiet)
        return
    inputs = _check_files(inputs, output, n_output_files)
    from .. import shuffle_lines

    stdout = sys.stdout.buffer  # the session sends what prints to stdout (progress bars) to stderr
    with session(progress=progress, debug=debug, **cluster) as show, contextlib.ExitStack() as stack:
        sources, dst = list(inputs), output
        if STDIO in inputs or output == STDIO:  # stdin and stdout go through files in a spool directory
            spool = Path(tempfile.mkdtemp(prefix="daskshuffle-", dir=tmp))
            stack.callback(shutil.rmtree, spool, ignore_errors=True)
            if STDIO in inputs:
                sources[inputs.index(STDIO)] = str(spool / "stdin")
                with open(spool / "stdin", "wb") as file:
                    shutil.copyfileobj(sys.stdin.buffer, file, 8 * 2**20)
            if output == STDIO:
                dst = str(spool / "shuffled")
        result = shuffle_lines(
            sources,
            dst,
            n_piles=n_piles,
            seed=seed,
            header=header,
            overwrite=overwrite,
            verify=verify,
            head_count=count,
            repeat=repeat,
            delimiter=delimiter,
            n_output_files=n_output_files,
            pile_memory=pile_memory,
            block_memory=block_memory,
            tmp=tmp,
            storage_options=storage_options,
            progress=show,
        )
        if output == STDIO:
            with open(dst, "rb") as file, _quiet_broken_pipe(stdout):
                shutil.copyfileobj(file, stdout, 8 * 2**20)
                stdout.flush()
        if not quiet:
            click.echo(summary(result, output), err=True)


def _check_files(inputs: tuple[str, ...], output: str, n_output_files: int | None) -> tuple[str, ...]:
    """The inputs of a shuffle of files (stdin if none), refusing what only the command line knows of."""
    if n_output_files is not None and output == STDIO:
        raise click.ClickException("Expected -o OUT with --n-output-files. Got standard output instead.")
    inputs = inputs or (STDIO,)
    if list(inputs).count(STDIO) > 1:
        raise click.UsageError("Expected stdin (-) once among IN. Got it more than once instead.")
    return inputs


@contextlib.contextmanager
def _quiet_broken_pipe(stdout: BinaryIO) -> Iterator[None]:
    """A reader that stops early (``| head``) ends the output, as it ends shuf's, without a traceback."""
    try:
        yield
    except BrokenPipeError:
        # Python would complain again when it flushes stdout at exit: point stdout at nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())


def _echo_items(
    inputs: tuple[str, ...], echo: bool, input_range: str | None, n_output_files: int | None, files_only: bool
) -> tuple[Callable[[int], bytes], int]:
    """The lines of -e (the arguments) or -i (the numbers LO to HI) by index, without making the range; how many.

    Refuses what -e and -i do not go with. HI may be LO - 1 (no numbers), as in shuf.
    """
    if echo and input_range is not None:
        raise click.ClickException("Expected -e or -i. Got both instead; choose one, as in shuf.")
    if n_output_files is not None or files_only:
        raise click.ClickException("Expected no --n-output-files, --header or --verify with -e or -i. Got one instead.")
    if input_range is None:
        arguments = [os.fsencode(argument) for argument in inputs]
        return arguments.__getitem__, len(arguments)
    if inputs:
        raise click.ClickException(f"Expected no IN with -i. Got {inputs[0]!r} instead.")
    low, _, high = input_range.partition("-")
    if not (low.isdigit() and high.isdigit()) or int(high) < int(low) - 1:
        raise click.ClickException(
            "Expected -i to be a range LO-HI of integers >= 0 with LO <= HI + 1, as in shuf. "
            f"Got {input_range!r} instead."
        )
    first = int(low)
    return (lambda index: b"%d" % (first + index)), int(high) - first + 1


def _shuffle_in_memory(
    items: tuple[Callable[[int], bytes], int],
    count: int | None,
    repeat: bool,
    seed: int | None,
    delimiter: bytes,
    output: str,
    overwrite: bool,
    quiet: bool,
) -> None:
    """-e and -i: shuffle or sample indices in memory (as shuf does) and write their lines.

    Into a file, the lines are written as ``shuffle_lines`` writes a sample: compressed as OUT's name
    says, under a partial name until whole.
    """
    from .._parse import parse_seed
    from .._random import make_rng

    lookup, n_items = items
    if repeat and n_items == 0:
        raise click.ClickException("Expected lines to repeat. Got none instead; -r needs at least one.")
    destination = None
    if output != STDIO:
        if repeat and count is None:
            raise click.ClickException(
                "Expected -n K with -r -o OUT. Got no -n instead; -r without -n repeats forever, which no file holds."
            )
        if os.path.exists(output) and not overwrite:
            raise click.ClickException(
                f"Expected OUT not to exist. Got {output!r}, which exists, instead; pass --overwrite to replace it."
            )
        destination = open_text_output(output, None, None)
    chosen = parse_seed(seed)
    rng = make_rng(chosen, "lines-in-memory")

    def batches() -> Iterator[list[bytes]]:
        if repeat and count is None:  # forever, as shuf -r: until the reader stops
            while True:
                yield [lookup(int(index)) + delimiter for index in rng.integers(0, n_items, _ECHO_BATCH)]
        if repeat:
            drawn = rng.integers(0, n_items, count or 0)
        elif count is None:
            drawn = rng.permutation(n_items)
        else:
            drawn = rng.choice(n_items, min(count, n_items), replace=False)
        for start in range(0, len(drawn), _ECHO_BATCH):
            yield [lookup(int(index)) + delimiter for index in drawn[start : start + _ECHO_BATCH]]

    n_written = 0
    if destination is None:
        stdout = sys.stdout.buffer
        with _quiet_broken_pipe(stdout):
            for batch in batches():
                stdout.write(b"".join(batch))
                n_written += len(batch)
            stdout.flush()
    else:
        import pyarrow as pa

        rows = pa.chunked_array([pa.array(batch, pa.large_binary()) for batch in batches()], pa.large_binary())
        destination.write(rows.combine_chunks(), header=b"")
        n_written = len(rows)
    if not quiet:
        click.echo(f"daskshuffle: {n_written:,} rows into {output}, seed={chosen}", err=True)
