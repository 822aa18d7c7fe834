"""What a shuffle of a given size does, as :func:`~daskshuffle.plan._scale.explain` computes it: :class:`ScaleModel`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from ._scale_report import GET_LATENCIES, scale_table

__all__ = ["ScaleModel"]


@dataclass(frozen=True)
class ScaleModel:
    """What a shuffle of ``n_rows`` rows of ``row_nbytes`` bytes does, from :func:`explain`.

    Reads are counted per variable (a Zarr source's variables are read
    separately; a Parquet merge reads all columns at once), and read sizes are
    those of whole rows (a variable's reads are its share of them).

    Attributes
    ----------
    n_rows, row_nbytes : int
        The data: rows and bytes per row.
    n_piles : int
        Piles, chosen as ``n_piles_from`` says: ``"given"``, ``"default"`` (the
        shuffles' default number, 512) or ``"auto"`` (the fewest that fit ``pile_memory``).
    block_nbytes, pile_nbytes, min_read_nbytes : int
        ``block_memory``, ``pile_memory`` and ``min_read``.
    n_workers : int
        Tasks that run at once, for the latency estimates.
    levels : int
        Times a row is scattered before the merge: 1 to 4 (``levels="auto"``
        picks as a shuffle does, for ``storage``).
    n_super : int
        Super-piles each level but the last splits every super-pile into (1
        with one level): the last level has ``n_super ** (levels - 1)``.
    n_first_reads, first_read_nbytes : int, float
        With several levels, each later pass's reads of the pieces of the
        pass before (per variable) and their size; 0 with one level.
    n_blocks, rows_per_block : int
        Pass-1 tasks, and the rows each reads (the last block may hold fewer).
    n_groups : int
        Merge tasks: runs of whole piles of about ``block_memory``, one pile at least.
    n_pieces : int
        Pieces that hold rows (expected), of ``n_blocks * n_piles``.
    n_reads : int
        Reads of pieces the merge makes per variable (expected): one per block
        that holds rows of a group, for every group.
    read_nbytes : float
        The mean read, ``data_nbytes / n_reads``.
    plan_nbytes : int
        Memory of the plan on the client.
    largest_pile_rows : int
        The typical largest pile (the median of the largest of ``n_piles``).
    overflow_probability : float
        An upper bound (a union bound over the piles) on the probability that
        some pile exceeds ``pile_memory``. With ``n_piles="auto"`` the plan is
        then drawn again with more piles; otherwise the shuffle refuses to start.
    advice : str
        What to change when reads fall below ``min_read``, or ``""``.
    """

    n_rows: int
    row_nbytes: int
    n_piles: int
    n_piles_from: Literal["given", "default", "auto"]
    block_nbytes: int
    pile_nbytes: int
    min_read_nbytes: int
    n_workers: int
    levels: int
    n_super: int
    n_first_reads: int
    first_read_nbytes: float
    n_blocks: int
    rows_per_block: int
    n_groups: int
    n_pieces: int
    n_reads: int
    read_nbytes: float
    plan_nbytes: int
    largest_pile_rows: int
    overflow_probability: float
    advice: str

    @property
    def data_nbytes(self) -> int:
        return self.n_rows * self.row_nbytes

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
            "data_nbytes": self.data_nbytes,
            "below_knee": self.below_knee,
            "passes": self.passes,
            "latency_seconds": {f"{latency * 1000:g}ms": self.latency_seconds(latency) for latency in GET_LATENCIES},
        }

    def __str__(self) -> str:
        return scale_table(self)
