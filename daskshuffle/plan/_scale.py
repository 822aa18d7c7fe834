"""The scale model: what a shuffle of a given size does, computed without reading any data.

Pure numpy and math. It runs the planning code itself where it can (the piles and levels as
:func:`~daskshuffle.plan._rules.choose_layout` picks them, blocks as a Zarr source cuts them, merge
groups from pile sizes drawn as a plan draws them); what depends on every block's draw (how many
pieces and reads are not empty) is an expectation. A read of a one-level merge is about
``block x group / data`` bytes, shrinking with the square of the data: past the knee, where reads fall
below ``min_read``, more levels (:mod:`daskshuffle.plan._levels`) or larger blocks keep them large.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Literal

import numpy as np

from .._errors import DaskShuffleValueError
from .._parse import format_size, parse_levels, parse_n_piles, parse_nbytes, parse_positive_int, parse_whole_number
from ._levels import MAX_LEVELS
from ._plan import auto_n_piles, block_rows, make_plan, merge_runs
from ._rules import choose_layout
from ._scale_model import ScaleModel

__all__ = ["DEFAULT_MIN_READ", "DEFAULT_N_PILES", "explain"]

#: Reads smaller than this cost more in request latency than in moving bytes (on object storage).
DEFAULT_MIN_READ = "64KiB"
#: The piles of a shuffle into a pile store (``shuffle_zarr``'s ``n_piles=512``), for ``n_piles=None``.
DEFAULT_N_PILES = 512
#: The largest ``block_memory`` the model's advice suggests: a task holds about that much.
MAX_TASK_MEMORY = 4 * 2**30
#: Up to this many piles the model draws pile sizes as a plan does and groups them as a merge does;
#: beyond, piles are taken at their mean size (their spread is then a small share of a group).
DRAWN_PILES = 100_000


def explain(
    rows: int | float,
    row_bytes: int,
    *,
    n_piles: int | Literal["auto"] | None = None,
    block_memory: int | str = "64MiB",
    pile_memory: int | str = "256MiB",
    workers: int = 1,
    min_read: int | str = DEFAULT_MIN_READ,
    levels: int | Literal["auto"] = "auto",
    storage: Literal["local", "object"] = "object",
) -> ScaleModel:
    """What a shuffle of ``rows`` rows of ``row_bytes`` bytes would do, computed without reading data.

    Blocks, piles, merge groups, pieces, reads and their size, the plan's memory, the largest pile
    and the chance a pile outgrows ``pile_memory``, and whether reads fall below ``min_read`` (the
    knee), with what to change if they do. ``daskshuffle plan`` prints the same.

    Parameters
    ----------
    rows : int
        Rows of the source: a whole number, also written as a float (``1e10``).
    row_bytes : int
        Bytes of one row, every variable (or column) together.
    n_piles : int, "auto" or None
        As a shuffle takes it. ``None``: the default of the shuffles but ``shuffle_lines`` (512).
    block_memory, pile_memory : int or str
        As a shuffle takes them (defaults ``"64MiB"`` and ``"256MiB"``).
    workers : int, default 1
        Tasks that run at once (worker threads), for the latency estimates.
    min_read : int or str, default "64KiB"
        The smallest read worth its request, which ``levels="auto"`` keeps reads above.
    levels : {"auto", 1, 2, 3, 4}, default "auto"
        As a shuffle takes it: ``"auto"`` decides as a shuffle does, for ``storage``.
    storage : {"object", "local"}, default "object"
        Where the pieces go: object storage (a URL) or a local disk.

    Returns
    -------
    ScaleModel
        Printing it shows a table; ``to_dict()`` gives the figures.

    Raises
    ------
    DaskShuffleValueError
        As a shuffle of the same arguments does, with the same message: a row larger than
        ``pile_memory``, ``n_piles`` piles that could not fit ``pile_memory``, fewer than
        ``2**levels`` piles, or a plan that would hold more than 2 GiB on the client.

    Notes
    -----
    A shuffle of the same arguments uses the ``n_piles`` and ``levels`` predicted here, or raises
    the same error, but for these:

    - A drawn pile larger than ``pile_memory`` (with the chance ``overflow_probability``) makes
      ``n_piles="auto"`` draw again with about 10% more piles, and a given ``n_piles`` raise.
    - Blocks are taken as ``block_memory // row_bytes`` rows each; a source's blocks are whole
      chunks or row groups, so it may have more, which may tip ``levels="auto"``.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> model = ds.explain(2**30, row_bytes=1024, n_piles="auto")  # 1 TiB
    >>> model.n_piles, model.n_blocks, model.levels, model.below_knee
    (4145, 16384, 2, False)
    >>> print(model)  # doctest: +ELLIPSIS
    data            1,073,741,824 rows of 1 KiB = 1 TiB
    layout          2 levels: pass 1 to 128 super-piles, pass 2 to piles within each, then a merge
    ...
    pass 2 reads    2,097,152 per variable of 512 KiB: at least min_read=64 KiB, or whole blocks
    reads           530,560 per variable of 1.98 MiB: at least min_read=64 KiB, or whole blocks
    ...
    """
    model = _model(
        parse_whole_number(rows, "rows"),
        parse_positive_int(row_bytes, "row_bytes"),
        parse_n_piles(n_piles) if n_piles is not None else None,
        parse_nbytes(block_memory, "block_memory"),
        pile_nbytes=parse_nbytes(pile_memory, "pile_memory"),
        n_workers=parse_positive_int(workers, "workers"),
        min_read_nbytes=parse_nbytes(min_read, "min_read"),
        levels=parse_levels(levels),
        storage=_parse_storage(storage),
    )
    return dataclasses.replace(model, advice=_advice(model)) if model.below_knee else model


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
    *,
    pile_nbytes: int,
    n_workers: int,
    min_read_nbytes: int,
    levels: int | Literal["auto"],
    storage: Literal["local", "object"],
) -> ScaleModel:
    """The model of a shuffle of these sizes (arguments already parsed), without advice."""
    step = block_rows(row_nbytes, block_nbytes)
    n_blocks = -(-n_rows // step)
    layout = choose_layout(
        n_rows,
        row_nbytes,
        n_blocks,
        n_piles=DEFAULT_N_PILES if n_piles is None else n_piles,
        pile_nbytes=pile_nbytes,
        block_nbytes=block_nbytes,
        levels=levels,
        storage=storage,
    )
    chosen, depth = layout.n_piles, layout.levels
    lengths = np.array([step, n_rows - (n_blocks - 1) * step], dtype=np.float64)
    weights = np.array([n_blocks - 1, 1], dtype=np.float64)
    piles_per_group, group_weights = merge_groups(n_rows, row_nbytes, chosen, block_nbytes)
    n_groups = int(group_weights.sum())
    # A read of a group from a block happens if any of the block's rows chose one of the group's piles.
    hit = any_row_in(piles_per_group[:, None] / chosen, lengths)
    reads = float((group_weights[:, None] * weights * hit).sum())
    pieces = float((weights * chosen * any_row_in(np.float64(1.0 / chosen), lengths)).sum())
    n_reads = max(round(reads), n_groups)
    first_reads, first_read = 0, 0.0
    if depth > 1:
        # Each later pass reads each block's piece of a super-pile.
        n_super = layout.fanouts[0]
        first_reads, first_read = n_blocks * n_super, block_nbytes / n_super
        units, super_piles, pieces = n_blocks, 1, 0.0  # a level's blocks, and its super-piles
        for _ in range(depth - 1):
            pieces += units * n_super
            units = super_piles * n_super * -(-units // (super_piles * n_super))
            super_piles *= n_super
        pieces += units * chosen / super_piles
        n_reads = max(round(n_groups * units / super_piles), n_groups)  # a merge reads its super-pile's blocks
    return ScaleModel(
        **dataclasses.asdict(layout),
        n_piles_from="default" if n_piles is None else "auto" if n_piles == "auto" else "given",
        min_read_nbytes=min_read_nbytes,
        n_workers=n_workers,
        n_first_reads=first_reads,
        first_read_nbytes=first_read,
        n_groups=n_groups,
        n_pieces=round(pieces),
        n_reads=n_reads,
        read_nbytes=n_rows * row_nbytes / n_reads,
        largest_pile_rows=typical_largest(n_rows, chosen),
        overflow_probability=min(1.0, chosen * binomial_sf(pile_nbytes // row_nbytes, n_rows, 1.0 / chosen)),
    )


def _advice(model: ScaleModel) -> str:
    """What keeps reads at least ``min_read``: more levels, larger blocks, or fewer piles."""

    variant = functools.partial(
        _model,
        model.n_rows,
        model.row_nbytes,
        pile_nbytes=model.pile_nbytes,
        n_workers=model.n_workers,
        min_read_nbytes=model.min_read_nbytes,
        storage=model.storage,
    )

    for depth in range(model.levels + 1, MAX_LEVELS + 1):
        if model.n_piles < 2**depth:
            break
        deeper = variant(model.n_piles_asked, model.block_nbytes, levels=depth)
        if not deeper.below_knee:
            passes = "pass 2" if depth == 2 else f"passes 2-{depth}"
            more = depth - model.levels
            return (
                f"levels={depth} makes reads of {format_size(deeper.first_read_nbytes)} ({passes}) and "
                f"{format_size(deeper.read_nbytes)} (merge), {(depth - 1) * deeper.n_first_reads + deeper.n_reads:,} in "
                f"all, for {'one more pass' if more == 1 else f'{more} more passes'} over the data"
            )
    choices: list[tuple[int | Literal["auto"], str]] = [(model.n_piles_asked, "")]
    fewest = auto_n_piles(model.n_rows, model.row_nbytes, model.pile_nbytes)
    if model.n_piles > fewest and (model.levels == 1 or fewest >= 2**model.levels):
        choices.append(("auto", "n_piles='auto' and "))
    best = model
    for piles, words in choices:
        block = model.block_nbytes
        while block < MAX_TASK_MEMORY:
            block = min(block * 2, MAX_TASK_MEMORY)
            candidate = variant(piles, block, levels=model.levels)
            best = max(best, candidate, key=lambda found: found.read_nbytes)
            if not candidate.below_knee:
                levels_words = f"levels={model.levels}, " if model.levels > 1 else ""
                return (
                    f"{levels_words}{words}block_memory='{format_size(block)}' make reads of "
                    f"{format_size(candidate.read_nbytes)} ({candidate.n_reads:,} of them); each task then holds about "
                    f"{format_size(block)}"
                )
    return (
        f"no layout whose tasks hold at most {format_size(MAX_TASK_MEMORY)} reads {format_size(model.min_read_nbytes)} "
        f"at a time from {format_size(model.data_nbytes)}: at best {format_size(best.read_nbytes)} "
        f"(block_memory='{format_size(best.block_nbytes)}', {best.n_piles:,} piles)."
    )


def merge_groups(n_rows: int, row_nbytes: int, n_piles: int, block_nbytes: int) -> tuple[Any, Any]:
    """The merge's groups as (piles in a group, how many groups have that many), as arrays."""
    if n_piles <= DRAWN_PILES:
        # Pile sizes as a plan draws them: one block's counts have the distribution of the sum over blocks.
        sizes = make_plan([n_rows], n_piles, seed=0).pile_sizes
        found = np.bincount([stop - start for start, stop in merge_runs(sizes, row_nbytes, max(block_nbytes, 1))])
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


def any_row_in(fraction: Any, lengths: Any) -> Any:
    """The chance that at least one of ``lengths`` rows falls in a ``fraction`` of the piles."""
    with np.errstate(divide="ignore"):
        return -np.expm1(lengths * np.log1p(-np.minimum(fraction, 1.0)))


def binomial_sf(threshold: int, n: int, p: float) -> float:
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


def typical_largest(n_rows: int, n_piles: int) -> int:
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
