"""The scale model: what a shuffle of a given size does, computed without reading any data.

Pure: numpy and math (a size given as a string is parsed by dask's
``parse_bytes``, as every other size is). The model runs the planning code
itself where it can: the number of piles is chosen as a shuffle chooses it
(:func:`~daskshuffle.plan._plan.auto_n_piles`), blocks are cut as a Zarr source cuts
them (:func:`~daskshuffle.plan._plan.block_rows`), and piles are grouped for the
merge by :func:`~daskshuffle.plan._plan.group_piles` from pile sizes drawn as a plan
draws them (:func:`~daskshuffle.plan._plan.make_plan` of one block, which has the
same distribution as the sum over blocks). What depends on every block's draw
(how many pieces and reads are not empty) is an expectation.

With one level, pass 1 writes each block's rows in pile order (``n_blocks x
n_piles`` pieces), and each merge task reads, from every block, the one
contiguous range of its group of piles. A read is therefore about ``block x
group / data`` bytes, which shrinks with the square of the data: past the knee,
where reads fall below ``min_read``, object storage spends its time on request
latency instead of moving bytes. With ``L`` levels (:mod:`daskshuffle.plan._levels`,
chosen as a shuffle chooses them), rows go first to ``S`` super-piles, which
each later level but the last splits ``S`` ways again; each later pass reads
each super-pile's pieces (one per block, ``block / S`` bytes) and the merge
reads ``S^(L - 1)`` times larger ranges, for one more pass over the data a level.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._errors import Argument, DaskShuffleValueError
from .._parse import parse_levels, parse_n_piles, parse_nbytes, parse_positive_int
from ._levels import MAX_LEVELS, auto_levels, fanout_for, level_plan_nbytes
from ._options import DEFAULT_BLOCK_MEMORY, DEFAULT_N_PILES, DEFAULT_PILE_MEMORY
from ._plan import auto_n_piles, block_rows, group_piles, make_plan, plan_nbytes

__all__ = ["DEFAULT_MIN_READ", "MAX_TASK_MEMORY", "ScaleModel", "explain"]

#: Reads smaller than this cost more in request latency than in moving bytes (on object storage).
DEFAULT_MIN_READ = "1MiB"
#: The largest ``block_memory`` the model's advice suggests: a task holds about that much.
MAX_TASK_MEMORY = 4 * 2**30
#: Latencies of one request to object storage, in seconds, for the model's estimates.
GET_LATENCIES = (0.010, 0.050)


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
        shuffles' default number) or ``"auto"`` (the fewest that fit ``pile_memory``).
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
        mean_pile = self.n_rows / self.n_piles
        fast, slow = (self.latency_seconds(latency) for latency in GET_LATENCIES)

        def verdict(read_nbytes: float) -> str:
            if self.n_blocks > 1 and read_nbytes < self.min_read_nbytes:
                return f"below min_read={_size(self.min_read_nbytes)}: past the knee"
            return f"at least min_read={_size(self.min_read_nbytes)}, or whole blocks"

        rows = [
            ("data", f"{self.n_rows:,} rows of {_size(self.row_nbytes)} = {_size(self.data_nbytes)}"),
            (
                "layout",
                "1 level: pass 1, then a merge of whole piles"
                if self.levels == 1
                else f"2 levels: pass 1 to {self.n_super:,} super-piles, pass 2 to piles within each, then a merge"
                if self.levels == 2
                else f"{self.levels} levels: pass 1 to {self.n_super:,} super-piles, "
                + ("pass 2 splits" if self.levels == 3 else f"passes 2 to {self.levels - 1} split")
                + f" each {self.n_super:,} ways, pass {self.levels} to piles within each, then a merge",
            ),
            ("piles", f"{self.n_piles:,} ({self.n_piles_from}) of {_size(mean_pile * self.row_nbytes)} on average"),
            (
                "largest pile",
                f"about {_size(self.largest_pile_rows * self.row_nbytes)}; P(any pile > pile_memory="
                f"{_size(self.pile_nbytes)}) <= {_probability(self.overflow_probability)}",
            ),
            ("blocks", f"{self.n_blocks:,} of {self.rows_per_block:,} rows (block_memory={_size(self.block_nbytes)})"),
            (
                "pass 1",
                f"{self.n_blocks:,} tasks: read {_size(self.data_nbytes)}, write {_size(self.data_nbytes)} "
                f"as {self.n_pieces:,} pieces",
            ),
            (
                "merge",
                f"{self.n_groups:,} tasks of {_number(self.n_piles / self.n_groups)} pile"
                f"{'' if self.n_groups == self.n_piles else 's'} each: read {_size(self.data_nbytes)}, "
                f"write {_size(self.data_nbytes)}",
            ),
            *(
                [
                    (
                        "pass 2 reads" if self.levels == 2 else f"pass 2-{self.levels} reads",
                        f"{self.n_first_reads:,} per variable of {_size(self.first_read_nbytes)}: "
                        + verdict(self.first_read_nbytes),
                    )
                ]
                if self.levels > 1
                else []
            ),
            ("reads", f"{self.n_reads:,} per variable of {_size(self.read_nbytes)}: {verdict(self.read_nbytes)}"),
            ("plan", f"{_size(self.plan_nbytes)} on the client"),
            (
                "object storage",
                f"{_duration(fast)} to {_duration(slow)} of request latency per variable "
                f"at {GET_LATENCIES[0] * 1000:g}-{GET_LATENCIES[1] * 1000:g} ms a read, {self.n_workers} at a time",
            ),
        ]
        if self.advice:
            rows.append(("advice", self.advice))
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def explain(
    rows: int,
    row_bytes: int,
    *,
    n_piles: int | Literal["auto"] | None = None,
    block_memory: int | str = DEFAULT_BLOCK_MEMORY,
    pile_memory: int | str = DEFAULT_PILE_MEMORY,
    workers: int = 1,
    min_read: int | str = DEFAULT_MIN_READ,
    levels: int | Literal["auto"] = "auto",
    storage: Literal["local", "object"] = "object",
) -> ScaleModel:
    """What a shuffle of ``rows`` rows of ``row_bytes`` bytes would do, computed without reading data.

    Blocks, piles, merge groups, pieces, reads and their size, bytes moved per
    pass, the plan's memory on the client, the largest pile and the chance that
    a pile outgrows ``pile_memory``, and whether reads fall below ``min_read``
    (the knee), with what to change if they do. The command line's
    ``daskshuffle plan`` prints the same.

    Parameters
    ----------
    rows : int
        Rows of the source.
    row_bytes : int
        Bytes of one row, every variable (or column) together.
    n_piles : int, "auto" or None
        As a shuffle takes it. ``None``: what a shuffle does by default, the
        default number of piles (512), or ``"auto"``'s number when that many
        would not fit ``pile_memory``.
    block_memory, pile_memory : int or str
        As a shuffle takes them (defaults ``"64MiB"`` and ``"256MiB"``).
    workers : int, default 1
        Tasks that run at once (worker threads), for the latency estimates.
    min_read : int or str, default "1MiB"
        The smallest read worth its request.
    levels : {"auto", 1, 2, 3, 4}, default "auto"
        As a shuffle takes it: ``"auto"`` decides as a shuffle does, for ``storage``.
    storage : {"object", "local"}, default "object"
        Where the pieces go: object storage (a URL) or a local disk.

    Returns
    -------
    ScaleModel
        Printing it shows a table; ``to_dict()`` gives the figures.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> model = ds.explain(2**30, row_bytes=1024)  # 1 TiB
    >>> model.n_piles, model.n_blocks, model.levels, model.below_knee
    (4145, 16384, 3, False)
    >>> print(model)  # doctest: +ELLIPSIS
    data            1,073,741,824 rows of 1 KiB = 1 TiB
    layout          3 levels: pass 1 to 25 super-piles, pass 2 splits each 25 ways, pass 3 to piles within each, ...
    ...
    pass 2-3 reads  409,600 per variable of 2.56 MiB: at least min_read=1 MiB, or whole blocks
    reads           111,915 per variable of 9.37 MiB: at least min_read=1 MiB, or whole blocks
    ...
    """
    return _model(
        parse_positive_int(rows, "rows"),
        parse_positive_int(row_bytes, "row_bytes"),
        parse_n_piles(n_piles) if n_piles is not None else None,
        parse_nbytes(block_memory, "block_memory"),
        parse_nbytes(pile_memory, "pile_memory"),
        parse_positive_int(workers, "workers"),
        parse_nbytes(min_read, "min_read"),
        advise=True,
        levels=parse_levels(levels),
        storage=_parse_storage(storage),
    )


def _parse_storage(storage: object) -> Literal["local", "object"]:
    if storage not in ("local", "object"):
        raise DaskShuffleValueError(
            f"Expected storage to be 'object' or 'local'. Got {storage!r} instead.", parameter="storage"
        )
    return "local" if storage == "local" else "object"


def _model(
    n_rows: int,
    row_nbytes: int,
    n_piles: int | Literal["auto"] | None,
    block_nbytes: int,
    pile_nbytes: int,
    n_workers: int,
    min_read_nbytes: int,
    *,
    advise: bool,
    levels: int | Literal["auto"] = 1,
    storage: Literal["local", "object"] = "object",
) -> ScaleModel:
    if row_nbytes > pile_nbytes:
        raise DaskShuffleValueError(
            (
                "Expected ",
                Argument("pile_memory"),
                f" to hold at least one row of {row_nbytes:,} bytes. Got {pile_nbytes:,} bytes instead; pass a larger ",
                Argument("pile_memory"),
                ".",
            ),
            parameter="pile_memory",
        )
    chosen, source = _choose_n_piles(n_rows, row_nbytes, n_piles, pile_nbytes)
    step = block_rows(row_nbytes, block_nbytes)
    n_blocks = -(-n_rows // step)
    lengths = np.array([step, n_rows - (n_blocks - 1) * step], dtype=np.float64)
    weights = np.array([n_blocks - 1, 1], dtype=np.float64)
    piles_per_group, group_weights = _groups(n_rows, row_nbytes, chosen, block_nbytes)
    n_groups = int(group_weights.sum())
    # A read of a group from a block happens if any of the block's rows chose one of the group's piles.
    hit = _any_row_in(piles_per_group[:, None] / chosen, lengths)
    reads = float((group_weights[:, None] * weights * hit).sum())
    pieces = float((weights * chosen * _any_row_in(np.float64(1.0 / chosen), lengths)).sum())
    n_reads = max(round(reads), n_groups)
    capacity = pile_nbytes // row_nbytes
    data = n_rows * row_nbytes
    depth = auto_levels(data, block_nbytes, n_blocks, chosen, storage) if levels == "auto" else levels
    depth = max(1, min(depth, int(math.log2(max(chosen, 1)))))  # a shuffle of more levels needs 2**levels piles
    n_super, first_reads, first_read, plan_bytes = 1, 0, 0.0, plan_nbytes(n_blocks, chosen)
    if depth > 1:
        # Each later pass reads each block's piece of a super-pile; the merge reads only its super-pile's blocks.
        n_super = fanout_for(data, block_nbytes, chosen, depth)
        first_reads, first_read = n_blocks * n_super, block_nbytes / n_super
        units, super_piles, pieces = n_blocks, 1, 0.0
        for _ in range(depth - 1):  # a level's blocks are groups of n_super blocks of a super-pile, split n_super ways
            pieces += units * n_super
            units = super_piles * n_super * -(-units // (super_piles * n_super))
            super_piles *= n_super
        n_reads = max(round(n_groups * units / super_piles), n_groups)
        pieces += units * chosen / super_piles
        plan_bytes = level_plan_nbytes(n_blocks, [n_super] * (depth - 1), chosen)
    model = ScaleModel(
        n_rows=n_rows,
        row_nbytes=row_nbytes,
        n_piles=chosen,
        n_piles_from=source,
        block_nbytes=block_nbytes,
        pile_nbytes=pile_nbytes,
        min_read_nbytes=min_read_nbytes,
        n_workers=n_workers,
        levels=depth,
        n_super=n_super,
        n_first_reads=first_reads,
        first_read_nbytes=first_read,
        n_blocks=n_blocks,
        rows_per_block=step,
        n_groups=n_groups,
        n_pieces=round(pieces),
        n_reads=n_reads,
        read_nbytes=n_rows * row_nbytes / n_reads,
        plan_nbytes=plan_bytes,
        largest_pile_rows=_typical_largest(n_rows, chosen),
        overflow_probability=min(1.0, chosen * _binomial_sf(capacity, n_rows, 1.0 / chosen)),
        advice="",
    )
    if advise and model.below_knee:
        model = dataclasses.replace(model, advice=_advice(model, n_piles, levels, storage))
    return model


#: Up to this many piles the model draws pile sizes as a plan does and groups them as a merge does;
#: beyond, piles are taken at their mean size (their spread is then a small share of a group).
DRAWN_PILES = 100_000


def _groups(n_rows: int, row_nbytes: int, n_piles: int, block_nbytes: int) -> tuple[Any, Any]:
    """The merge's groups as (piles in a group, how many groups have that many), as arrays."""
    if n_piles <= DRAWN_PILES:
        # Pile sizes as a plan draws them: one block's counts have the distribution of the sum over blocks.
        sizes = make_plan([n_rows], n_piles, seed=0).pile_sizes
        found = np.bincount([stop - start for start, stop in group_piles(sizes, row_nbytes, max(block_nbytes, 1))])
        present = np.nonzero(found)[0]
        return present.astype(np.float64), found[present].astype(np.float64)
    pile_nbytes = n_rows / n_piles * row_nbytes
    per_group = max(1, int(block_nbytes // max(pile_nbytes, 1.0)))
    full, rest = divmod(n_piles, per_group)
    kinds, counts = [float(per_group)], [float(full)]
    if rest:
        kinds.append(float(rest))
        counts.append(1.0)
    return np.array(kinds), np.array(counts)


def _choose_n_piles(
    n_rows: int, row_nbytes: int, n_piles: int | Literal["auto"] | None, pile_nbytes: int
) -> tuple[int, Literal["given", "default", "auto"]]:
    if isinstance(n_piles, int):
        return n_piles, "given"
    auto = auto_n_piles(n_rows, row_nbytes, pile_nbytes)
    if n_piles is None and auto <= DEFAULT_N_PILES:
        return DEFAULT_N_PILES, "default"
    return auto, "auto"


def _any_row_in(fraction: Any, lengths: Any) -> Any:
    """The chance that at least one of ``lengths`` rows falls in a ``fraction`` of the piles."""
    with np.errstate(divide="ignore"):
        return -np.expm1(lengths * np.log1p(-np.minimum(fraction, 1.0)))


def _advice(
    model: ScaleModel, n_piles: int | Literal["auto"] | None, levels: int | Literal["auto"], storage: Any
) -> str:
    """What keeps reads at least ``min_read``: more levels, larger blocks, or fewer piles."""

    def variant(block_nbytes: int, piles: int | Literal["auto"] | None, depth: int | Literal["auto"]) -> ScaleModel:
        return _model(
            model.n_rows,
            model.row_nbytes,
            piles,
            block_nbytes,
            model.pile_nbytes,
            model.n_workers,
            model.min_read_nbytes,
            advise=False,
            levels=depth,
            storage=storage,
        )

    for depth in range(model.levels + 1, MAX_LEVELS + 1):
        if model.n_piles < 2**depth:
            break
        deeper = variant(model.block_nbytes, n_piles, depth)
        if not deeper.below_knee:
            passes = "pass 2" if depth == 2 else f"passes 2-{depth}"
            more = depth - model.levels
            return (
                f"levels={depth} makes reads of {_size(deeper.first_read_nbytes)} ({passes}) and "
                f"{_size(deeper.read_nbytes)} (merge), {(depth - 1) * deeper.n_first_reads + deeper.n_reads:,} in "
                f"all, for {'one more pass' if more == 1 else f'{more} more passes'} over the data"
            )
    choices: list[tuple[int | Literal["auto"] | None, str]] = [(n_piles, "")]
    if model.n_piles > auto_n_piles(model.n_rows, model.row_nbytes, model.pile_nbytes):
        choices.append(("auto", "n_piles='auto' and "))
    best = model
    for piles, words in choices:
        block = model.block_nbytes
        while block < MAX_TASK_MEMORY:
            block = min(block * 2, MAX_TASK_MEMORY)
            candidate = variant(block, piles, model.levels)
            best = max(best, candidate, key=lambda found: found.read_nbytes)
            if not candidate.below_knee:
                levels_words = f"levels={model.levels}, " if model.levels > 1 else ""
                return (
                    f"{levels_words}{words}block_memory='{_size(block)}' make reads of "
                    f"{_size(candidate.read_nbytes)} ({candidate.n_reads:,} of them); each task then holds about "
                    f"{_size(block)}"
                )
    return (
        f"no layout whose tasks hold at most {_size(MAX_TASK_MEMORY)} reads {_size(model.min_read_nbytes)} "
        f"at a time from {_size(model.data_nbytes)}: at best {_size(best.read_nbytes)} "
        f"(block_memory='{_size(best.block_nbytes)}', {best.n_piles:,} piles)."
    )


def _binomial_sf(threshold: int, n: int, p: float) -> float:
    """``P(X > threshold)`` for ``X ~ Binomial(n, p)``: summed exactly for a narrow spread, else a normal tail."""
    if threshold >= n:
        return 0.0
    if threshold < 0 or p >= 1.0:
        return 1.0
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    if sd > 50.0:
        return 0.5 * math.erfc((threshold + 0.5 - mean) / (sd * math.sqrt(2.0)))
    reach = 40.0 * sd + 50.0
    if threshold + 1 < mean - reach:
        return 1.0
    first, last = threshold + 1, min(n, math.ceil(max(threshold + 1, mean) + reach))
    log_term = math.lgamma(n + 1) - math.lgamma(first + 1) - math.lgamma(n - first + 1)
    log_term += first * math.log(p) + (n - first) * math.log1p(-p)
    log_odds = math.log(p) - math.log1p(-p)
    logs = []
    for k in range(first, last + 1):
        logs.append(log_term)
        log_term += math.log((n - k) / (k + 1)) + log_odds if k < n else 0.0
    peak = max(logs)
    return min(1.0, math.exp(peak) * math.fsum(math.exp(value - peak) for value in logs))


def _typical_largest(n_rows: int, n_piles: int) -> int:
    """The median of the largest of ``n_piles`` pile sizes, by a normal tail and a union bound."""
    if n_piles == 1:
        return n_rows
    p = 1.0 / n_piles
    mean, sd = n_rows * p, math.sqrt(n_rows * p * (1.0 - p))
    tail = -math.expm1(math.log(0.5) / n_piles)  # P(one pile > x) that makes P(all piles <= x) = 1/2
    low, high = 0.0, 40.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if 0.5 * math.erfc(middle / math.sqrt(2.0)) > tail else (low, middle)
    return min(n_rows, math.ceil(mean + sd * low))


def _probability(value: float) -> str:
    return f"{value:.2g}" if value >= 1e-15 else "1e-15"


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _size(nbytes: float) -> str:
    """``1536`` -> ``1.5 KiB``: three significant digits, binary units."""
    value, unit = float(nbytes), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{_number(value)} {_UNITS[unit]}"


def _number(value: float) -> str:
    """Three significant digits, without an exponent: ``0.0123``, ``1.5``, ``123``, ``12,345``."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _duration(seconds: float) -> str:
    for limit, unit, scale in ((120, "s", 1), (7200, "min", 60), (172800, "h", 3600)):
        if seconds < limit:
            return f"{_number(seconds / scale)} {unit}"
    return f"{_number(seconds / 86400)} days"
