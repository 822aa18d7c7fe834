"""What every command shares: the group, the cluster session, one-line errors and the summary."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import click

from .._errors import NAMED, Argument, DaskShuffleError, DaskShuffleTypeError, DaskShuffleValueError

__all__ = [
    "STDIO",
    "Option",
    "cli",
    "main",
    "one_line",
    "reported",
    "session",
    "split_names",
    "summary",
]

STDIO = "-"


class Option(click.Option):
    """An option that sets a library argument of another name: ``-o/--output`` sets ``dst``.

    A library error about ``argument`` (its ``parameter``, or an :class:`Argument` its
    message names) is reported as this option.
    """

    def __init__(self, *args: Any, argument: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.argument = argument


def _option_of(parameter: str | None) -> click.Option | None:
    """The option of the running command that sets the library's argument ``parameter``."""
    context = click.get_current_context(silent=True)
    if parameter is None or context is None:
        return None
    for option in context.command.params:
        if isinstance(option, click.Option):
            argument = option.argument if isinstance(option, Option) else option.name
            if argument == parameter:
                return option
    return None


def spell(argument: Argument) -> str:
    """``argument`` as the running command's option (``--overwrite``, ``--n-piles 64``, ``leave out --header``).

    An argument the command has no option for keeps Python's spelling.
    """
    option = _option_of(argument.name)
    if option is None:
        return str(argument)
    flag = max(option.opts, key=len)
    if argument.value is NAMED:
        return flag
    if option.is_flag:
        if argument.value:
            return f"pass {flag}" if argument.passed else flag
        return f"leave out {flag}" if argument.passed else f"no {flag}"
    if option.multiple and isinstance(argument.value, dict):  # --storage-option KEY=VALUE, once a key
        pairs = (f"{key}={item if isinstance(item, str) else json.dumps(item)}" for key, item in argument.value.items())
        given = " ".join(f"{flag} {shlex.quote(pair)}" for pair in pairs)
        return f"pass {given}" if argument.passed else given
    value = (option.metavar or "NAMES") if argument.value is Ellipsis else str(argument.value)
    return f"pass {flag} {value}" if argument.passed else f"{flag} {value}"


def one_line(error: BaseException) -> str:
    """One line for ``error``; the library's own errors already say what to do, and name arguments as options."""
    if isinstance(error, DaskShuffleError):
        text = error.spelled(spell)
    else:  # an OSError says what it is; another error's kind is named
        kind = "" if isinstance(error, OSError | EOFError) else f"{type(error).__name__}: "
        text = f"{kind}{error}  (run with --debug for the traceback)"
    return " ".join(text.split())


def _bad_argument(error: BaseException) -> click.BadParameter | None:
    """A usage error (exit status 2) for a library input error about one of the command's own options."""
    if not isinstance(error, DaskShuffleValueError | DaskShuffleTypeError):
        return None
    option = _option_of(error.parameter)
    return click.BadParameter(one_line(error), param=option) if option is not None else None


@contextlib.contextmanager
def session(
    *,
    scheduler: str | None,
    debug: bool,
    workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit: str | None = None,
    progress: bool | None = None,
) -> Iterator[bool]:
    """Run the body on the chosen scheduler (``cluster_options``), its errors :func:`reported`, stdout on stderr.

    Yields whether to show progress bars on stderr (``--progress``, or stderr is a terminal).
    """
    if scheduler and (workers or threads_per_worker or memory_limit):
        raise click.UsageError(
            "Expected either --scheduler or --workers/--threads-per-worker/--memory-limit. Got both instead; "
            "the sizing options describe the LocalCluster that --scheduler replaces."
        )
    with reported(debug), contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(sys.stderr))  # stdout may be the output
        if scheduler in ("threads", "sync"):  # one of dask's local schedulers, without a cluster
            import dask

            stack.enter_context(dask.config.set(scheduler=scheduler))
        else:
            stack.enter_context(_client(scheduler, workers, threads_per_worker, memory_limit, debug))
        try:
            yield sys.stderr.isatty() if progress is None else progress
        except KeyboardInterrupt:
            if not debug:  # the cluster closes next: its cancelled tasks are not news
                for name in ("distributed", "tornado", "asyncio"):
                    logging.getLogger(name).setLevel(logging.CRITICAL + 1)
            raise


#: Exit statuses of a command stopped by a signal, as a shell reports them: 128 + the signal's number.
INTERRUPTED, TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM


@contextlib.contextmanager
def reported(debug: bool) -> Iterator[None]:
    """Turn any error in the body into one line and exit status 1 (the traceback under ``--debug``).

    An error about one of the command's own options is a usage error (status 2); Ctrl-C and SIGTERM
    stop the body with one line saying what was interrupted, and status 130 or 143.
    """
    received: list[int] = []

    def terminate(signum: int, frame: object) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    try:
        # SIGTERM stops the body as Ctrl-C does: what a run leaves is named, the cluster closed.
        with _handling(signal.SIGTERM, terminate):
            yield
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except KeyboardInterrupt as interrupt:
        if debug:
            raise
        what = " ".join((str(interrupt) or "Interrupted.").split())
        # On a new line: a progress bar stops where it was, in the middle of its line.
        click.echo(("\n" if sys.stderr.isatty() else "") + f"daskshuffle: {what}", err=True)
        raise click.exceptions.Exit(TERMINATED if received else INTERRUPTED) from None
    except Exception as error:
        if debug:
            raise
        raise _bad_argument(error) or click.ClickException(one_line(error)) from None


@contextlib.contextmanager
def _handling(signum: int, handler: Any) -> Iterator[None]:
    """``handler`` handles the signal ``signum`` in the body (only the main thread may set one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)


@contextlib.contextmanager
def _client(
    address: str | None, workers: int | None, threads_per_worker: int | None, memory_limit: str | None, debug: bool
) -> Iterator[None]:
    """A distributed client of the cluster at ``address``, or of a LocalCluster started here, current for the body."""
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
    if not debug:
        # Worker processes log on this stderr too. A task's error reaches the client, which reports
        # it; what a worker logs alone is noise here, such as a heartbeat cut short by its own closing.
        sizing["silence_logs"] = logging.CRITICAL
    # Loopback only: the scheduler and its dashboard run code and show data, for this machine's user alone.
    # (Without worker processes the scheduler talks in-process and opens no port; only the dashboard listens.)
    if sizing["processes"]:
        sizing["host"] = "127.0.0.1"
    # Worker processes inherit an ignored SIGINT: a terminal sends Ctrl-C to every process of its
    # foreground group, and this process alone stops the run and closes the cluster.
    with _handling(signal.SIGINT, signal.SIG_IGN):
        cluster = LocalCluster(dashboard_address="127.0.0.1:0", **{k: v for k, v in sizing.items() if v is not None})
    with cluster, Client(cluster) as client, client.as_current():
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


def summary(result: Any, where: str) -> str:
    piles = "1 pile" if result.n_piles == 1 else f"{result.n_piles:,} piles"
    return f"daskshuffle: {result.n_rows:,} rows into {where} in {piles}, seed={result.seed}, {result.seconds:.1f} s"


def split_names(values: Sequence[str]) -> list[str] | None:
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    return names or None


@functools.wraps(cli.main)
def main(args: Sequence[str] | None = None) -> None:
    """Run the command line (the ``daskshuffle`` console script)."""
    cli.main(args=list(args) if args is not None else None, prog_name="daskshuffle")
