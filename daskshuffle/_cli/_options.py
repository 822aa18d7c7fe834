"""The options that several commands share, each declared once, and the types (click's ``ParamType``) they read.

The shuffles' options carry the shuffles' defaults (``tests/test_options.py`` checks they agree).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import click

from .._errors import DaskShuffleError
from .._parse import parse_nbytes
from .._random import MAX_SEED
from ._common import one_line

__all__ = [
    "DEBUG",
    "QUIET",
    "SHUFFLE_DEFAULTS",
    "STORAGE_OPTIONS",
    "Count",
    "NPiles",
    "cluster_options",
    "json_options",
    "option_group",
    "positive_option",
    "shuffle_option",
    "size_option",
]

#: A decorator that adds options to a command.
Options = Callable[[Callable[..., Any]], Callable[..., Any]]

if TYPE_CHECKING:  # ParamType is generic in newer click only: subscript it for the type checker alone
    _NPilesBase = click.ParamType[int | Literal["auto"], Any]
    _SizeBase = click.ParamType[str, Any]
    _CountBase = click.ParamType[int, Any]
else:
    _NPilesBase = _SizeBase = _CountBase = click.ParamType


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
            number = 0
        if number < 1:
            self.fail(f"Expected a positive integer or 'auto'. Got {value!r} instead.", param, ctx)
        return number


class Count(_CountBase):
    """A whole number: ``1000000``, ``1_000_000``, ``1,000,000`` or ``1e6``."""

    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).replace("_", "").replace(",", "")
        try:
            number = float(text) if any(letter in text for letter in ".eE") else int(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number != int(number):
            self.fail(f"Expected a whole number such as 1000000 or 1e6. Got {value!r} instead.", param, ctx)
        return int(number)


class Size(_SizeBase):
    """A size in bytes such as ``256MiB`` or ``1000000``, checked as the library checks it and passed on as given.

    ``fraction=True`` also takes ``auto`` and a fraction of the machine's memory in (0, 1], as
    ``distributed.LocalCluster(memory_limit=...)`` does.
    """

    name = "SIZE"

    def __init__(self, *, fraction: bool = False) -> None:
        self.fraction = fraction

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        if self.fraction and (text == "auto" or _is_fraction(text)):
            return text
        try:
            parse_nbytes(text, param.name if param and param.name else "size")
        except DaskShuffleError as error:
            if self.fraction:
                self.fail(
                    f"Expected a size such as '2GiB', a fraction of memory such as 0.5, or 'auto'. Got {value!r} instead.",
                    param,
                    ctx,
                )
            self.fail(one_line(error), param, ctx)
        return text


def _storage_options(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
    """The ``--storage-option KEY=VALUE`` values as the ``storage_options`` dict, or ``None`` without any.

    Each value is JSON where it parses, else text: ``anon=true`` is ``{"anon": True}``, ``profile=dev`` is
    ``{"profile": "dev"}``, and ``client_kwargs={"endpoint_url": "http://localhost:9000"}`` a nested dict.
    """
    options: dict[str, Any] = {}
    for value in values:
        key, equals, text = value.partition("=")
        key = key.strip()
        if not equals or not key:
            raise click.BadParameter(
                f"Expected KEY=VALUE, such as anon=true or profile=dev. Got {value!r} instead.", ctx=ctx, param=param
            )
        if key in options:
            raise click.BadParameter(f"Expected each KEY once. Got {key!r} twice instead.", ctx=ctx, param=param)
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options or None


#: ``--storage-option KEY=VALUE`` (repeatable): the library's ``storage_options``, for every URL the command opens.
STORAGE_OPTIONS = click.option(
    "--storage-option",
    "storage_options",
    metavar="KEY=VALUE",
    multiple=True,
    callback=_storage_options,
    help="A storage option for fsspec, for every URL (s3://, gs://, ...): credentials (key=..., secret=..., "
    'profile=..., anon=true), endpoint (client_kwargs=\'{"endpoint_url": "http://..."}\'). Values are JSON '
    "where they parse, else text. Repeat it for each option.",
)


def _is_fraction(text: str) -> bool:
    try:
        return 0 < float(text) <= 1
    except ValueError:
        return False


def option_group(*declared: Options) -> Options:
    """One decorator that adds the options ``declared`` to a command, in this order in its help."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(declared):
            command = option(command)
        return command

    return add


def size_option(flag: str, help: str, default: str | None = None, **attrs: Any) -> Options:
    """``flag SIZE``: a size in bytes such as ``256MiB``; a default is shown in the help."""
    if default is not None:
        attrs.update(default=default, show_default=True)
    return click.option(flag, type=Size(), metavar="SIZE", help=help, **attrs)


def positive_option(flag: str, help: str, **attrs: Any) -> Options:
    """``flag``: a positive integer."""
    return click.option(flag, type=click.IntRange(min=1), help=help, **attrs)


#: ``-q/--quiet``: no summary line.
QUIET = click.option("-q", "--quiet", is_flag=True, help="Do not print the summary line on stderr.")

#: The options every shuffling command shares: where to run, progress, debugging.
cluster_options = option_group(
    click.option(
        "--scheduler",
        metavar="ADDRESS",
        help="Run on an existing dask cluster (tcp://host:8786), or on dask's local 'threads' or 'sync' "
        "scheduler without a cluster. By default a LocalCluster sized to this machine is started.",
    ),
    positive_option(
        "--workers",
        "Start a LocalCluster of this many worker processes.  [default: one worker in this process, "
        "with a thread per core]",
    ),
    positive_option(
        "--threads-per-worker", "Threads in each worker.  [default: one per core without --workers, else 1]"
    ),
    click.option(
        "--memory-limit",
        type=Size(fraction=True),
        metavar="SIZE",
        help="Memory limit of each worker of the LocalCluster, such as 2GiB.  [default: the machine's share]",
    ),
    click.option(
        "--progress/--no-progress",
        default=None,
        help="Show a progress bar on stderr.  [default: when stderr is a terminal]",
    ),
    QUIET,
    click.option("--debug", is_flag=True, help="Show tracebacks and the cluster's logs."),
)

#: ``--debug`` of a command that starts no cluster.
DEBUG = click.option("--debug", is_flag=True, help="Show tracebacks.")


def json_options(help: str) -> Options:
    """``--json`` (the command's ``as_json``) and ``--debug``, of a command that prints what it found."""
    return option_group(click.option("--json", "as_json", is_flag=True, help=help), DEBUG)


#: Each common option of the shuffles: its default in the shuffles into a pile store (``shuffle_zarr``'s), its help,
#: and how it reads on the command line (its type, or a flag).
_SHUFFLE_OPTIONS: Mapping[str, tuple[object, str, Mapping[str, Any]]] = {
    "n_piles": (512, "Piles; auto fits --pile-memory.", {"type": NPiles()}),
    "seed": (
        None,
        "Same source and seed give the same output.  [default: drawn and reported]",
        {"type": click.IntRange(0, MAX_SEED)},
    ),
    "overwrite": (False, "Replace the pile store at DST if there is one (never anything else).", {"is_flag": True}),
    "materialize": (False, "Write a fully shuffled copy instead of a pile store.", {"is_flag": True}),
    "pile_memory": ("256MiB", "The largest pile allowed.", {"type": Size(), "metavar": "SIZE"}),
    "block_memory": ("64MiB", "About how much of the source one task reads.", {"type": Size(), "metavar": "SIZE"}),
    "tmp": (None, "Where pieces go.  [default: next to DST]", {"metavar": "DIR"}),
    "verify": (False, "Then prove DST holds exactly the rows of SRC (daskshuffle verify).", {"is_flag": True}),
}
SHUFFLE_DEFAULTS: Mapping[str, object] = {name: default for name, (default, _, _) in _SHUFFLE_OPTIONS.items()}


def shuffle_option(name: str, help: str | None = None, defaults: Mapping[str, object] | None = None) -> Options:
    """``--name`` for the common option ``name`` of the shuffles, with its default (or the one ``defaults`` gives).

    A default is shown in the help; a flag's is off, and ``None`` is the shuffle's to choose. ``help``: a command's
    own words for it, else the shuffles'.
    """
    default = (defaults or {}).get(name, SHUFFLE_DEFAULTS[name])
    _, shared_help, attrs = _SHUFFLE_OPTIONS[name]
    flags = dict(attrs)
    if default is not None and not flags.get("is_flag"):
        flags.update(default=str(default), show_default=True)
    return click.option("--" + name.replace("_", "-"), help=help or shared_help, **flags)
