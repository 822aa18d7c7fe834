"""The scale model as text: the table ``print(explain(...))`` shows, and the sizes, counts and times in it.

:class:`~daskshuffle.plan._scale_model.ScaleModel` prints as :func:`scale_table`;
the command line's ``daskshuffle plan`` prints the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._scale_model import ScaleModel

__all__ = ["GET_LATENCIES", "format_duration", "format_number", "format_probability", "format_size", "scale_table"]

#: Latencies of one request to object storage, in seconds, for the model's estimates.
GET_LATENCIES = (0.010, 0.050)


def scale_table(model: ScaleModel) -> str:
    """The model as a table of two columns: what (data, layout, piles, passes, reads, ...) and how much.

    Examples
    --------
    >>> from daskshuffle.plan._scale import explain
    >>> print(scale_table(explain(10**6, 100)).splitlines()[0])
    data            1,000,000 rows of 100 B = 95.4 MiB
    """
    mean_pile = model.n_rows / model.n_piles
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
            f"{format_size(model.pile_nbytes)}) <= {format_probability(model.overflow_probability)}",
        ),
        (
            "blocks",
            f"{model.n_blocks:,} of {model.rows_per_block:,} rows (block_memory={format_size(model.block_nbytes)})",
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


def format_probability(value: float) -> str:
    """Two significant digits, and ``1e-15`` for anything smaller (a bound, not an estimate, that far out)."""
    return f"{value:.2g}" if value >= 1e-15 else "1e-15"


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_size(nbytes: float) -> str:
    """``1536`` -> ``1.5 KiB``: three significant digits, binary units."""
    value, unit = float(nbytes), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{format_number(value)} {_UNITS[unit]}"


def format_number(value: float) -> str:
    """Three significant digits, without an exponent: ``0.0123``, ``1.5``, ``123``, ``12,345``."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def format_duration(seconds: float) -> str:
    """In the largest unit that keeps the number under about 100: ``90 s``, ``2.5 min``, ``3.1 days``."""
    for limit, unit, scale in ((120, "s", 1), (7200, "min", 60), (172800, "h", 3600)):
        if seconds < limit:
            return f"{format_number(seconds / scale)} {unit}"
    return f"{format_number(seconds / 86400)} days"
