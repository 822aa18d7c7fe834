"""What a shuffle of a given size does, as :func:`~daskshuffle.plan._scale.explain` computes it: :class:`ScaleModel`,
and the table ``print(explain(...))`` shows (the command line's ``daskshuffle plan`` prints the same)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from .._parse import format_number, format_size
from ._rules import Layout

__all__ = ["ScaleModel"]
#: Latencies of one request to object storage, in seconds, for the model's estimates.
GET_LATENCIES = (0.010, 0.050)


@dataclass(frozen=True)
class ScaleModel(Layout):
    """What a shuffle of ``n_rows`` rows of ``row_nbytes`` bytes does, from :func:`explain`: its
    :class:`Layout` and what follows from it.

    Reads are counted per variable (a Parquet merge reads all columns at once), and read sizes are
    those of whole rows.

    Attributes
    ----------
    n_rows, row_nbytes : int
        The data: rows and bytes per row.
    n_piles : int
        Piles, chosen as ``n_piles_from`` says: ``"given"``, ``"default"`` (512) or ``"auto"``.
    block_nbytes, pile_nbytes, min_read_nbytes : int
        ``block_memory``, ``pile_memory`` and ``min_read``.
    n_workers : int
        Tasks that run at once, for the latency estimates.
    levels : int
        Times a row is scattered before the merge: 1 to 4.
    n_super : int
        Super-piles each level but the last splits every super-pile into (1 with one level).
    n_first_reads, first_read_nbytes : int, float
        Each later pass's reads (per variable) and their size; 0 with one level.
    n_blocks, block_rows : int
        Pass-1 tasks, and the rows each reads (the last block may hold fewer).
    n_groups : int
        Merge tasks: runs of whole piles of about ``block_memory``, one pile at least.
    n_pieces : int
        Pieces that hold rows (expected), of ``n_blocks * n_piles``.
    n_reads : int
        Reads of pieces the merge makes per variable (expected).
    read_nbytes : float
        The mean read, ``data_nbytes / n_reads``.
    plan_nbytes : int
        Memory of the plan on the client.
    largest_pile_rows : int
        The typical largest pile (the median of the largest of ``n_piles``).
    overflow_probability : float
        A union bound on the probability that some pile exceeds ``pile_memory``.
    advice : str
        What to change when reads fall below ``min_read``, or ``""``.
    storage, n_piles_asked, levels_asked, fanouts
        As a shuffle's :class:`Layout` holds them.
    """

    n_piles_from: Literal["given", "default", "auto"]
    min_read_nbytes: int
    n_workers: int
    n_first_reads: int
    first_read_nbytes: float
    n_groups: int
    n_pieces: int
    n_reads: int
    read_nbytes: float
    largest_pile_rows: int
    overflow_probability: float
    advice: str = ""

    @property
    def n_super(self) -> int:
        return self.fanouts[0] if self.fanouts else 1

    @property
    def below_knee(self) -> bool:
        """Whether reads fall below ``min_read`` where larger ones are possible (more than one block)."""
        smallest = min(self.read_nbytes, self.first_read_nbytes) if self.levels > 1 else self.read_nbytes
        return self.n_blocks > 1 and smallest < self.min_read_nbytes

    @property
    def passes(self) -> list[dict[str, int]]:
        """Per pass: its tasks and the bytes it reads and writes (each pass moves every byte once)."""
        data = self.data_nbytes
        later = {"tasks": self.n_blocks + self.n_super ** (self.levels - 1), "read_nbytes": data, "write_nbytes": data}
        return [
            {"tasks": self.n_blocks, "read_nbytes": data, "write_nbytes": data},
            *([later] * (self.levels - 1)),
            {"tasks": self.n_groups, "read_nbytes": data, "write_nbytes": data},
        ]

    def latency_seconds(self, latency: float) -> float:
        """Wall time the merge's reads of one variable spend waiting, at ``latency`` seconds a request."""
        return (self.n_reads + self.n_first_reads) * latency / self.n_workers

    def to_dict(self) -> dict[str, Any]:
        """The fields and what follows from them, for JSON."""
        return {
            **dataclasses.asdict(self),
            "levels": self.levels,
            "n_super": self.n_super,
            "block_rows": self.block_rows,
            "data_nbytes": self.data_nbytes,
            "plan_nbytes": self.plan_nbytes,
            "below_knee": self.below_knee,
            "passes": self.passes,
            "latency_seconds": {f"{latency * 1000:g}ms": self.latency_seconds(latency) for latency in GET_LATENCIES},
        }

    def __str__(self) -> str:
        return scale_table(self)


def scale_table(model: ScaleModel) -> str:
    """The model as a table of two columns: what (data, layout, piles, passes, reads, ...) and how much.

    Examples
    --------
    >>> from daskshuffle.plan._scale import explain
    >>> print(scale_table(explain(10**6, 100)).splitlines()[0])
    data            1,000,000 rows of 100 B = 95.4 MiB
    """
    mean_pile = model.n_rows / model.n_piles
    # A bound, not an estimate, that far out: two significant digits, and 1e-15 for anything smaller.
    probability = f"{model.overflow_probability:.2g}" if model.overflow_probability >= 1e-15 else "1e-15"
    fast, slow = (model.latency_seconds(latency) for latency in GET_LATENCIES)

    def verdict(read_nbytes: float) -> str:
        if model.n_blocks > 1 and read_nbytes < model.min_read_nbytes:
            return f"below min_read={format_size(model.min_read_nbytes)}: past the knee"
        return f"at least min_read={format_size(model.min_read_nbytes)}, or whole blocks"

    rows = [
        ("data", f"{model.n_rows:,} rows of {format_size(model.row_nbytes)} = {format_size(model.data_nbytes)}"),
        (
            "layout",
            "1 level: pass 1, then a merge of whole piles"
            if model.levels == 1
            else f"2 levels: pass 1 to {model.n_super:,} super-piles, pass 2 to piles within each, then a merge"
            if model.levels == 2
            else f"{model.levels} levels: pass 1 to {model.n_super:,} super-piles, "
            + ("pass 2 splits" if model.levels == 3 else f"passes 2 to {model.levels - 1} split")
            + f" each {model.n_super:,} ways, pass {model.levels} to piles within each, then a merge",
        ),
        (
            "piles",
            f"{model.n_piles:,} ({model.n_piles_from}) of {format_size(mean_pile * model.row_nbytes)} on average",
        ),
        (
            "largest pile",
            f"about {format_size(model.largest_pile_rows * model.row_nbytes)}; P(any pile > pile_memory="
            f"{format_size(model.pile_nbytes)}) <= {probability}",
        ),
        (
            "blocks",
            f"{model.n_blocks:,} of {model.block_rows:,} rows (block_memory={format_size(model.block_nbytes)})",
        ),
        (
            "pass 1",
            f"{model.n_blocks:,} tasks: read {format_size(model.data_nbytes)}, write {format_size(model.data_nbytes)} "
            f"as {model.n_pieces:,} pieces",
        ),
        (
            "merge",
            f"{model.n_groups:,} tasks of {format_number(model.n_piles / model.n_groups)} pile"
            f"{'' if model.n_groups == model.n_piles else 's'} each: read {format_size(model.data_nbytes)}, "
            f"write {format_size(model.data_nbytes)}",
        ),
        *(
            [
                (
                    "pass 2 reads" if model.levels == 2 else f"pass 2-{model.levels} reads",
                    f"{model.n_first_reads:,} per variable of {format_size(model.first_read_nbytes)}: "
                    + verdict(model.first_read_nbytes),
                )
            ]
            if model.levels > 1
            else []
        ),
        ("reads", f"{model.n_reads:,} per variable of {format_size(model.read_nbytes)}: {verdict(model.read_nbytes)}"),
        ("plan", f"{format_size(model.plan_nbytes)} on the client"),
        (
            "object storage",
            f"{format_duration(fast)} to {format_duration(slow)} of request latency per variable "
            f"at {GET_LATENCIES[0] * 1000:g}-{GET_LATENCIES[1] * 1000:g} ms a read, {model.n_workers} at a time",
        ),
    ]
    if model.advice:
        rows.append(("advice", model.advice))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def format_duration(seconds: float) -> str:
    """In the largest unit that keeps the number under about 100: ``90 s``, ``2.5 min``, ``3.1 days``."""
    for limit, unit, scale in ((120, "s", 1), (7200, "min", 60), (172800, "h", 3600)):
        if seconds < limit:
            return f"{format_number(seconds / scale)} {unit}"
    return f"{format_number(seconds / 86400)} days"
