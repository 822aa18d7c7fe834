"""The ``daskshuffle`` command line: a thin layer over the public functions.

Every shuffling command starts a ``distributed.LocalCluster`` sized to the
machine, or connects to ``--scheduler ADDRESS``; the library itself never
starts a cluster. Errors are one line on stderr and a non-zero exit status,
with the traceback only under ``--debug``.

To add a command for another kind of data, write a function decorated with
``@cli.command(...)`` and ``@_cluster_options`` next to ``lines`` and ``zarr``,
and call its public shuffle inside ``with _session(...)``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from ._errors import DaskShuffleError, DaskShuffleTypeError, DaskShuffleValueError, UnfinishedShuffleError
from ._options import (
    DEFAULT_BLOCK_MEMORY,
    DEFAULT_LINES_BLOCK_MEMORY,
    DEFAULT_LINES_PILE_MEMORY,
    DEFAULT_N_PILES,
    DEFAULT_PARQUET_COMPRESSION,
    DEFAULT_PILE_MEMORY,
    PARQUET_COMPRESSIONS,
)

__all__ = ["cli", "main"]

#: Values of ``--scheduler`` that run on one of dask's local schedulers, without a cluster.
LOCAL_SCHEDULERS = ("threads", "sync")
STDIO = "-"


if TYPE_CHECKING:  # ParamType is generic in newer click only: subscript it for the type checker alone
    _NPilesBase = click.ParamType[int | Literal["auto"], Any]
else:
    _NPilesBase = click.ParamType


class NPiles(_NPilesBase):
    """``auto`` or a positive integer."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | Literal["auto"]:
        if value == "auto":
            return "auto"
        if isinstance(value, int):
            return value
        try:
            number = int(value)
        except ValueError:
            self.fail(f"Expected a positive integer or 'auto'. Got {value!r} instead.", param, ctx)
        if number < 1:
            self.fail(f"Expected a positive integer or 'auto'. Got {value!r} instead.", param, ctx)
        return number


def _cluster_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options every shuffling command shares: where to run, progress, debugging."""
    options = [
        click.option(
            "--scheduler",
            metavar="ADDRESS",
            help="Run on an existing dask cluster (tcp://host:8786), or on dask's local 'threads' or 'sync' "
            "scheduler without a cluster. By default a LocalCluster sized to this machine is started.",
        ),
        click.option(
            "--workers",
            type=click.IntRange(min=1),
            help="Start a LocalCluster of this many worker processes.  [default: one worker in this process, "
            "with a thread per core]",
        ),
        click.option(
            "--threads-per-worker",
            type=click.IntRange(min=1),
            help="Threads in each worker.  [default: one per core without --workers, else 1]",
        ),
        click.option(
            "--memory-limit",
            metavar="SIZE",
            help="Memory limit of each worker of the LocalCluster, such as 2GiB.  [default: the machine's share]",
        ),
        click.option(
            "--progress/--no-progress",
            default=None,
            help="Show a progress bar on stderr.  [default: when stderr is a terminal]",
        ),
        click.option("-q", "--quiet", is_flag=True, help="Do not print the summary line on stderr."),
        click.option("--debug", is_flag=True, help="Show tracebacks and the cluster's logs."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _option_of(parameter: str | None) -> click.Parameter | None:
    """The option of the running command that sets the library's argument ``parameter``."""
    context = click.get_current_context(silent=True)
    if parameter is None or context is None:
        return None
    return next((option for option in context.command.params if option.name == parameter), None)


def _spell_options(text: str) -> str:
    """The library's Python spellings of the running command's options, as options.

    Every option of the command whose name is a library argument is spelled as
    the user types it: ``overwrite=True`` -> ``--overwrite``, ``pass header=False``
    -> ``leave out --header``, ``n_piles=512`` -> ``--n-piles 512``,
    ``variables=[...]`` -> ``--variables NAMES``, ``pile_memory`` -> ``--pile-memory``.
    The spellings come from the command's own options, so they cannot drift.
    """
    context = click.get_current_context(silent=True)
    for option in context.command.params if context is not None else []:
        if not isinstance(option, click.Option) or option.name is None or option.name not in text:
            continue
        flag = max(option.opts, key=len)
        metavar = option.metavar or "NAMES"
        for python, spelled in (
            (f"pass {option.name}=False", f"leave out {flag}"),
            (f"{option.name}=True", flag),
            (f"{option.name}=False", f"no {flag}"),
            (f"{option.name}=[...]", f"{flag} {metavar}"),
            (f"{option.name}=", f"{flag} "),
        ):
            text = text.replace(python, spelled)
        if "_" in option.name:  # a bare argument name, never an English word such as "header"
            text = re.sub(rf"\b{option.name}\b", flag, text)
    return text


def _message(error: BaseException) -> str:
    """One line for ``error``; the library's own errors already say what to do."""
    if isinstance(error, DaskShuffleError):
        text = _spell_options(str(error))
    elif isinstance(error, OSError | EOFError):
        text = f"{error}  (run with --debug for the traceback)"
    else:
        text = f"{type(error).__name__}: {error}  (run with --debug for the traceback)"
    return " ".join(text.split())


def _bad_argument(error: BaseException) -> click.BadParameter | None:
    """A usage error (exit status 2) for a library error about one of the command's own options."""
    if type(error) not in (DaskShuffleValueError, DaskShuffleTypeError):
        return None
    option = _option_of(getattr(error, "parameter", None))
    return click.BadParameter(_message(error), param=option) if option is not None else None


@contextlib.contextmanager
def _session(
    *,
    scheduler: str | None,
    workers: int | None,
    threads_per_worker: int | None,
    memory_limit: str | None,
    debug: bool,
) -> Iterator[None]:
    """Run the body on the chosen scheduler; turn any error into one line and exit status 1.

    An error about one of the command's own options is a usage error, exit status 2, as click's own are.
    """
    if scheduler and (workers or threads_per_worker or memory_limit):
        raise click.UsageError(
            "Expected either --scheduler or --workers/--threads-per-worker/--memory-limit. Got both instead; "
            "the sizing options describe the LocalCluster that --scheduler replaces."
        )
    try:
        with _scheduler(scheduler, workers, threads_per_worker, memory_limit, debug):
            yield
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except KeyboardInterrupt:
        raise click.Abort() from None
    except Exception as error:
        if debug:
            raise
        raise _bad_argument(error) or click.ClickException(_message(error)) from None


@contextlib.contextmanager
def _scheduler(
    address: str | None, workers: int | None, threads_per_worker: int | None, memory_limit: str | None, debug: bool
) -> Iterator[None]:
    if address in LOCAL_SCHEDULERS:
        import dask

        with dask.config.set(scheduler=address):
            yield
        return
    from distributed import Client, LocalCluster

    if not debug:
        # The cluster's own progress chatter would bury the one line that matters.
        logging.getLogger("distributed").setLevel(logging.ERROR)
    if address:
        with Client(address) as client, client.as_current():
            yield
        return
    if workers is None:
        # One worker in this process, a thread per core: the shuffles' work is file I/O, NumPy and
        # Arrow, which release the GIL, so threads run it in parallel without a process's memory
        # and without copying every block and pile between processes.
        sizing: dict[str, Any] = {"processes": False, "n_workers": 1, "threads_per_worker": threads_per_worker}
    else:
        sizing = {"processes": True, "n_workers": workers, "threads_per_worker": threads_per_worker or 1}
    if memory_limit:
        sizing["memory_limit"] = memory_limit
    with (
        LocalCluster(dashboard_address=":0", **{k: v for k, v in sizing.items() if v is not None}) as cluster,
        Client(cluster) as client,
        client.as_current(),
    ):
        yield


def _progress(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else progress


@contextlib.contextmanager
def _progress_on_stderr() -> Iterator[None]:
    """Progress bars print to stdout; stdout may be the output."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


EXAMPLES_MAIN = """\b
Examples:
  daskshuffle lines corpus/*.jsonl.gz -o train.jsonl --seed 0
  cat data.txt | daskshuffle lines - -o - > shuffled.txt
  daskshuffle zarr raw-0.zarr raw-1.zarr piles.zarr --n-piles 512 --seed 0
  daskshuffle info piles.zarr
"""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}, epilog=EXAMPLES_MAIN)
@click.version_option(package_name="daskshuffle", prog_name="daskshuffle")
def cli() -> None:
    """Shuffle training data larger than memory, out of core, on dask.

    Each command runs the 2-pass shuffle on a LocalCluster it starts (or on
    --scheduler ADDRESS). See `daskshuffle COMMAND --help`.
    """


EXAMPLES_LINES = """\b
Examples:
  daskshuffle lines big.jsonl -o shuffled.jsonl --seed 0
  daskshuffle lines 'corpus/*.txt.gz' extra.txt -o train.txt --workers 4 --memory-limit 2GiB
  daskshuffle lines table.csv -o shuffled.csv --header
  zcat data.gz | daskshuffle lines - -o - | head
"""


@cli.command(epilog=EXAMPLES_LINES, short_help="Shuffle the lines of text files, exactly, out of core.")
@click.argument("inputs", nargs=-1, required=True, metavar="IN...")
@click.option("-o", "--output", required=True, metavar="OUT", help="The output file, or - for standard output.")
@click.option("--seed", type=int, help="Same input and seed give the same output.  [default: drawn and reported]")
@click.option("--n-piles", type=NPiles(), default="auto", show_default=True, help="Piles; auto fits --pile-memory.")
@click.option("--header", is_flag=True, help="Keep the first line of the first file at the top.")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
@click.option("--tmp", metavar="DIR", help="Where pieces (and a spooled stdin) go.  [default: next to OUT]")
@click.option(
    "--pile-memory",
    default=DEFAULT_LINES_PILE_MEMORY,
    show_default=True,
    metavar="SIZE",
    help="The largest pile allowed.",
)
@click.option(
    "--block-memory",
    metavar="SIZE",
    help=f"Bytes of input one task reads.  [default: {DEFAULT_LINES_BLOCK_MEMORY}, or half of --pile-memory if less]",
)
@_cluster_options
def lines(
    inputs: tuple[str, ...],
    output: str,
    seed: int | None,
    n_piles: int | Literal["auto"],
    header: bool,
    overwrite: bool,
    tmp: str | None,
    pile_memory: str,
    block_memory: str | None,
    progress: bool | None,
    quiet: bool,
    debug: bool,
    **cluster: Any,
) -> None:
    """Shuffle the lines of text files (IN..., - for stdin) into OUT: exactly, like shuf, but out of core.

    Files ending in .gz, .bz2, .xz or .zst are decompressed. Bytes are kept as
    they are; a final line without a newline gets one.
    """
    from ._lines import shuffle_lines

    if list(inputs).count(STDIO) > 1:
        raise click.UsageError("Expected stdin (-) once among IN. Got it more than once instead.")
    with _session(debug=debug, **cluster), contextlib.ExitStack() as stack:
        spool: Path | None = None
        if STDIO in inputs or output == STDIO:
            spool = Path(tempfile.mkdtemp(prefix="daskshuffle-", dir=tmp))
            stack.callback(shutil.rmtree, spool, ignore_errors=True)
        sources = [str(_spool_stdin(spool)) if item == STDIO and spool else item for item in inputs]
        dst = str(spool / "shuffled") if output == STDIO and spool else output
        show = _progress(progress)
        with _progress_on_stderr():
            result = shuffle_lines(
                sources,
                dst,
                n_piles=n_piles,
                seed=seed,
                header=header,
                overwrite=overwrite,
                pile_memory=pile_memory,
                block_memory=block_memory,
                tmp=tmp,
                progress=show,
            )
        if output == STDIO:
            with open(dst, "rb") as file:
                shutil.copyfileobj(file, sys.stdout.buffer, 8 * 2**20)
            sys.stdout.buffer.flush()
        if not quiet:
            click.echo(_summary(result, output), err=True)


def _spool_stdin(directory: Path) -> Path:
    path = directory / "stdin"
    with open(path, "wb") as file:
        shutil.copyfileobj(sys.stdin.buffer, file, 8 * 2**20)
    return path


def _summary(result: Any, where: str) -> str:
    piles = "1 pile" if result.n_piles == 1 else f"{result.n_piles:,} piles"
    return f"daskshuffle: {result.n_rows:,} rows into {where} in {piles}, seed={result.seed}, {result.seconds:.1f} s"


def _split_names(values: Sequence[str]) -> list[str] | None:
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    return names or None


EXAMPLES_ZARR = """\b
Examples:
  daskshuffle zarr raw.zarr piles.zarr --n-piles 512 --seed 0
  daskshuffle zarr part-*.zarr piles.zarr --variables x,y --materialize
  daskshuffle zarr s3://bucket/raw.zarr s3://bucket/piles.zarr --scheduler tcp://10.0.0.1:8786
"""


def _store_shuffle_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the commands that shuffle into a pile store (zarr, parquet)."""
    options = [
        click.argument("paths", nargs=-1, required=True, metavar="SRC... DST"),
        click.option(
            "--n-piles",
            type=NPiles(),
            default=str(DEFAULT_N_PILES),
            show_default=True,
            help="Piles; auto fits --pile-memory.",
        ),
        click.option(
            "--seed", type=int, help="Same source and seed give the same output.  [default: drawn and reported]"
        ),
        click.option("--materialize", is_flag=True, help="Write a fully shuffled copy instead of a pile store."),
        click.option("--overwrite", is_flag=True, help="Replace DST if it exists."),
        click.option("--tmp", metavar="DIR", help="Where pieces go.  [default: next to DST]"),
        click.option(
            "--pile-memory",
            default=DEFAULT_PILE_MEMORY,
            show_default=True,
            metavar="SIZE",
            help="The largest pile allowed.",
        ),
        click.option(
            "--block-memory",
            default=DEFAULT_BLOCK_MEMORY,
            show_default=True,
            metavar="SIZE",
            help="Source one task reads.",
        ),
    ]
    command = _cluster_options(command)
    for option in reversed(options):
        command = option(command)
    return command


def _shuffle_into_store(shuffle: Callable[..., Any], paths: tuple[str, ...], **options: Any) -> None:
    """Run ``shuffle(SRC..., DST, **options)`` on the cluster the options choose, and report it."""
    if len(paths) < 2:
        raise click.UsageError("Expected at least one SRC and a DST. Got only one path instead.")
    *sources, dst = paths
    cluster = {key: options.pop(key) for key in ("scheduler", "workers", "threads_per_worker", "memory_limit")}
    quiet, progress = options.pop("quiet"), options.pop("progress")
    with _session(debug=options.pop("debug"), **cluster), _progress_on_stderr():
        result = shuffle(sources, dst, progress=_progress(progress), **options)
    if not quiet:
        click.echo(_summary(result, dst), err=True)


@cli.command(epilog=EXAMPLES_ZARR, short_help="Shuffle the rows of Zarr arrays into a pile store.")
@click.option("--variables", multiple=True, metavar="NAMES", help="Arrays to shuffle, comma-separated.  [default: all]")
@_store_shuffle_options
def zarr(paths: tuple[str, ...], variables: tuple[str, ...], **options: Any) -> None:
    """Shuffle the rows of Zarr groups or arrays (SRC...) into a Zarr pile store DST.

    Arrays that share their first dimension are shuffled with one permutation.
    Read the result with daskshuffle.PileLoader, zarr or xarray.
    """
    from ._shuffle import shuffle_zarr

    _shuffle_into_store(shuffle_zarr, paths, variables=_split_names(variables), **options)


EXAMPLES_PARQUET = """\b
Examples:
  daskshuffle parquet raw/ piles/ --n-piles 512 --seed 0
  daskshuffle parquet 'events/*.parquet' piles/ --columns id,x,label --materialize
  daskshuffle parquet s3://bucket/raw/ s3://bucket/piles/ --scheduler tcp://10.0.0.1:8786
"""


@cli.command(epilog=EXAMPLES_PARQUET, short_help="Shuffle the rows of Parquet files into a pile store.")
@click.option("--columns", multiple=True, metavar="NAMES", help="Columns to shuffle, comma-separated.  [default: all]")
@click.option(
    "--compression",
    type=click.Choice(PARQUET_COMPRESSIONS),
    default=DEFAULT_PARQUET_COMPRESSION,
    show_default=True,
    help="The Parquet codec of DST.",
)
@_store_shuffle_options
def parquet(paths: tuple[str, ...], columns: tuple[str, ...], **options: Any) -> None:
    """Shuffle the rows of Parquet files, directories or globs (SRC...) into a Parquet pile store DST.

    DST is a Parquet dataset directory (a row group per pile) that pandas,
    pyarrow and dask read. Read it for training with daskshuffle.PileLoader.
    """
    from ._frames import shuffle_parquet

    _shuffle_into_store(shuffle_parquet, paths, columns=_split_names(columns), **options)


EXAMPLES_INFO = """\b
Examples:
  daskshuffle info piles.zarr
  daskshuffle info piles.zarr --json | jq .seed
"""


@cli.command(epilog=EXAMPLES_INFO, short_help="Show what a pile store holds, and whether it is complete.")
@click.argument("store")
@click.option("--json", "as_json", is_flag=True, help="Print the store's metadata as JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def info(store: str, as_json: bool, debug: bool) -> None:
    """What a pile store holds: rows, piles and their sizes, seed, variables, complete or not.

    Exits with status 1 if the store is incomplete (its shuffle did not finish).
    """
    from .formats import open_pile_reader

    try:
        reader = open_pile_reader(store)
    except UnfinishedShuffleError as error:
        if debug:
            raise
        click.echo(json.dumps({"path": store, "complete": False}) if as_json else f"{store}\n  complete: no")
        raise click.ClickException(_message(error)) from None
    except Exception as error:
        if debug:
            raise
        raise click.ClickException(_message(error)) from None
    metadata = dict(reader.metadata)
    if as_json:
        click.echo(json.dumps({"path": store, **metadata}, indent=2, default=str))
        return
    click.echo(_describe(store, metadata, reader.pile_offsets))


def _describe(store: str, metadata: dict[str, Any], pile_offsets: Any) -> str:
    import numpy as np

    sizes = np.diff(pile_offsets)
    spread = (
        f"min {int(sizes.min()):,}, median {int(np.median(sizes)):,}, max {int(sizes.max()):,}" if len(sizes) else "-"
    )
    sources = metadata.get("source") or []
    rows = [
        ("kind", metadata.get("kind")),
        ("complete", "yes"),
        ("rows", f"{int(metadata['n_rows']):,}"),
        ("piles", f"{int(metadata['n_piles']):,} (rows per pile: {spread})"),
        ("seed", metadata.get("seed")),
        ("materialized", "yes" if metadata.get("materialized") else "no (piles are shuffled on read)"),
        ("variables", ", ".join(metadata.get("variables") or []) or "-"),
        ("source", sources[0] + (f" and {len(sources) - 1} more" if len(sources) > 1 else "") if sources else "-"),
        ("format version", metadata.get("format_version")),
    ]
    return "\n".join([store, *(f"  {name}: {value}" for name, value in rows)])


@functools.wraps(cli.main)
def main(args: Sequence[str] | None = None) -> None:
    """Run the command line (the ``daskshuffle`` console script)."""
    cli.main(args=list(args) if args is not None else None, prog_name="daskshuffle")
