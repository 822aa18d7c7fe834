"""The options every public shuffle shares, declared once: names, defaults, types and docs.

:data:`COMMON_OPTIONS` holds each option's name, default and doc;
:class:`ShuffleKeywords` (and :class:`TextKeywords`, for ``shuffle_lines``) its
type, as a shuffle takes it in ``**options: Unpack[ShuffleKeywords]``, so that a
type checker checks its callers' keywords. :func:`~daskshuffle.plan._options.common_options`
checks at import that the two name the same options, and builds each shuffle's
public signature from them.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypedDict

__all__ = [
    "COMMON_OPTIONS",
    "DEFAULT_BLOCK_MEMORY",
    "DEFAULT_LINES_BLOCK_MEMORY",
    "DEFAULT_LINES_PILE_MEMORY",
    "DEFAULT_N_PILES",
    "DEFAULT_PARQUET_COMPRESSION",
    "DEFAULT_PILE_MEMORY",
    "PARQUET_COMPRESSIONS",
    "TEXT_DEFAULTS",
    "TEXT_FIXED",
    "CommonOption",
    "ShuffleKeywords",
    "TextKeywords",
]

#: Piles of a pile store (``shuffle_zarr``, ``shuffle_parquet``, ...).
DEFAULT_N_PILES = 512
#: The largest pile a pile store's shuffle allows.
DEFAULT_PILE_MEMORY = "256MiB"
#: About how much of the source one pass-1 task reads.
DEFAULT_BLOCK_MEMORY = "64MiB"
#: ``shuffle_lines`` holds about two copies of a block or a pile (plus offsets):
#: these keep a worker thread near 100 MB however large the input is.
DEFAULT_LINES_PILE_MEMORY = "32MiB"
DEFAULT_LINES_BLOCK_MEMORY = "16MiB"
#: The codecs a Parquet pile store can be written with, and the default.
PARQUET_COMPRESSIONS = ("auto", "snappy", "zstd", "lz4", "gzip", "brotli", "none")
DEFAULT_PARQUET_COMPRESSION = "auto"


@dataclass(frozen=True)
class CommonOption:
    """One argument that every public shuffle takes: its default, its type as the docs show it, and its doc."""

    name: str
    default: object
    kind: str
    doc: str

    def describe(self, default: object, note: str = "") -> str:
        """The numpydoc entry of this option with ``default`` (a shuffle's own, or the common one)."""
        if default is None:
            header = f"{self.name} : {self.kind}, optional"
        elif isinstance(default, str):
            header = f'{self.name} : {self.kind}, default "{default}"'
        else:
            header = f"{self.name} : {self.kind}, default {default!r}"
        body = textwrap.fill(f"{self.doc} {note}".strip(), width=80, break_on_hyphens=False)
        return header + "\n" + textwrap.indent(body, "    ")


#: The arguments every public shuffle takes after ``dst``, with their defaults and docs, in the order a user reads
#: them. A public shuffle declares them with :func:`common_options`, which checks its signature at import.
COMMON_OPTIONS: tuple[CommonOption, ...] = (
    CommonOption(
        "n_piles",
        DEFAULT_N_PILES,
        'int or "auto"',
        'Number of piles. ``"auto"`` picks the fewest piles that fit ``pile_memory``.',
    ),
    CommonOption(
        "seed",
        None,
        "int",
        "Same seed, same source and same parameters give the same output, whatever the cluster. ``None`` draws a "
        "seed and records it (``ShuffleResult.seed``); a resumable shuffle interrupted and called again with "
        "``None`` continues with the seed it drew. (A loader's ``seed=None`` means the store's recorded seed "
        "instead: the loader reads the order a shuffle drew.)",
    ),
    CommonOption("overwrite", False, "bool", "Replace ``dst`` if it exists (only once every check has passed)."),
    CommonOption("materialize", False, "bool", "Write a fully shuffled copy instead of a pile store."),
    CommonOption(
        "pile_memory",
        DEFAULT_PILE_MEMORY,
        "int or str",
        'The largest pile allowed, in bytes or as a size such as "256MiB", checked at planning time, before '
        "anything is written.",
    ),
    CommonOption(
        "block_memory",
        DEFAULT_BLOCK_MEMORY,
        "int or str",
        'About how much of the source one pass-1 task reads, in bytes or as a size such as "64MiB".',
    ),
    CommonOption(
        "tmp",
        None,
        "path or URL",
        "A directory for the pieces between the passes; they go to a subdirectory named after ``dst``, removed at "
        "the end, also after an error. ``tmp`` itself is never removed. By default ``<dst>.daskshuffle-tmp``, next "
        "to ``dst``; for a ``dst`` on object storage, this machine's temporary directory instead when every worker "
        "sees it and it has room for 2.5 times the data (a local disk writes and reads them faster than requests).",
    ),
    CommonOption("progress", False, "bool", "Show a progress bar."),
    CommonOption("storage_options", None, "dict", "Passed to fsspec for URLs."),
    CommonOption(
        "verify",
        False,
        "bool",
        "Once the output is written, prove it holds exactly the source's rows (:func:`daskshuffle.verify`: an "
        "order-independent checksum of every variable on both sides, about a third of the shuffle's time); "
        "``VerificationError`` if not.",
    ),
    CommonOption(
        "levels",
        "auto",
        '{"auto", 1, 2, 3, 4}',
        "Levels of scatter before the merge. With one, the merge reads about ``block_memory**2 / data`` bytes from "
        "every block, which falls with the data's size; with ``L``, rows go first to about ``(data / "
        "block_memory)^(1/L)`` super-piles, each split as many ways again by every level but the last, then to "
        'piles, keeping reads large for one more write and read of the data a level. ``"auto"`` adds levels '
        "where fewer would make ten thousand reads or more of under 1 MiB on object storage (two from about 6 GiB "
        "with the defaults, three from about 256 GiB, four from about 16 TiB), or of under 64 KiB on local disk "
        "(two from about 64 GiB); :func:`daskshuffle.explain` shows the choice.",
    ),
)
_BY_NAME = {option.name: option for option in COMMON_OPTIONS}

#: ``shuffle_lines``' own defaults, for text: a task holds about two copies of a block or a pile (plus
#: offsets), and these keep a worker thread near 100 MB however large the input is; with ``n_piles="auto"``
#: the piles follow from ``pile_memory``. Its ``block_memory=None`` is :func:`lines_block_memory`.
TEXT_DEFAULTS: Mapping[str, object] = MappingProxyType(
    {"n_piles": "auto", "pile_memory": DEFAULT_LINES_PILE_MEMORY, "block_memory": None}
)
#: Common options that ``shuffle_lines`` does not take, and the value it runs with: its output is a text file,
#: always fully shuffled.
TEXT_FIXED: Mapping[str, object] = MappingProxyType({"materialize": True})


class _Keywords(TypedDict, total=False):
    """The keyword options of every public shuffle (all of :data:`COMMON_OPTIONS` but ``n_piles``), and their types."""

    seed: int | None
    overwrite: bool
    pile_memory: int | str
    tmp: str | os.PathLike[str] | None
    progress: bool
    storage_options: dict[str, Any] | None
    verify: bool
    levels: int | Literal["auto"]


class ShuffleKeywords(_Keywords, total=False):
    """The keyword options of a shuffle into a pile store: ``shuffle(src, dst, n_piles, **options)``."""

    materialize: bool
    block_memory: int | str


class TextKeywords(_Keywords, total=False):
    """The keyword options of ``shuffle_lines``: no ``materialize`` (:data:`TEXT_FIXED`); ``block_memory`` may be ``None``."""

    block_memory: int | str | None
