"""The planning rules: how many piles and levels a shuffle uses, decided from sizes alone.

One set of rules for every shuffle and for :func:`~daskshuffle.explain`, so that the model predicts
the shuffle's piles and levels, or raises the same error. Pure arithmetic: nothing here draws. Every
layout's plan must fit :attr:`Layout.plan_budget` on the client, so that a mistyped ``n_piles`` is an
error at once, not a process killed for memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from .._errors import Argument, DaskShuffleValueError
from .._parse import format_size
from ._levels import auto_levels, fanout_for, level_plan_nbytes
from ._plan import auto_n_piles, plan_nbytes

__all__ = ["Layout", "choose_layout"]

#: The memory a shuffle's plan may take on the client, or :data:`PLAN_DATA_FRACTION` of the data if that is
#: more; beyond, a plan is a mistake (a million piles for a few rows) or wants more levels.
PLAN_NBYTES = 2 * 2**30
#: The share of the data's bytes a plan may take on the client, where that is more than :data:`PLAN_NBYTES`.
PLAN_DATA_FRACTION = 1 / 1024
#: What each pile costs the client beside the plan's arrays (its offsets, its part of the merge's tasks).
PILE_CLIENT_NBYTES = 256


@dataclass(frozen=True)
class Layout:
    """What a shuffle decides before drawing its plan: piles, levels, and the sizes they follow from.

    Attributes
    ----------
    n_rows, row_nbytes, n_blocks : int
        The source: rows, bytes per row, and the blocks pass 1 reads.
    block_nbytes, pile_nbytes : int
        ``block_memory`` and ``pile_memory``.
    storage : {"local", "object"}
        Where the pieces go.
    n_piles_asked, levels_asked : int or "auto"
        What the shuffle was asked for.
    n_piles : int
        Piles of the output.
    fanouts : tuple of int
        Super-piles each level but the last splits into (empty: one level).
    """

    n_rows: int
    row_nbytes: int
    n_blocks: int
    block_nbytes: int
    pile_nbytes: int
    storage: Literal["local", "object"]
    n_piles_asked: int | Literal["auto"]
    levels_asked: int | Literal["auto"]
    n_piles: int
    fanouts: tuple[int, ...]

    @property
    def levels(self) -> int:
        return len(self.fanouts) + 1

    @property
    def data_nbytes(self) -> int:
        return self.n_rows * self.row_nbytes

    @property
    def plan_budget(self) -> int:
        """The most bytes the plan may take on the client: :data:`PLAN_NBYTES`, or a share of larger data."""
        return max(PLAN_NBYTES, int(self.data_nbytes * PLAN_DATA_FRACTION))

    @property
    def plan_nbytes(self) -> int:
        """About the bytes of the arrays of a plan of this layout."""
        if self.fanouts:
            return level_plan_nbytes(self.n_blocks, list(self.fanouts), self.n_piles)
        return plan_nbytes(self.n_blocks, self.n_piles)

    @property
    def client_nbytes(self) -> int:
        """About the bytes the client holds for a plan of this layout: its arrays, and a little per pile."""
        return self.plan_nbytes + PILE_CLIENT_NBYTES * self.n_piles

    @property
    def block_rows(self) -> int:
        """About the rows of a block at every level (of a level plan), one at least."""
        return max(1, self.block_nbytes // max(self.row_nbytes, 1))

    def after_overflow(self, largest_nbytes: int) -> Layout:
        """The layout to draw again after a drawn pile of ``largest_nbytes`` exceeded ``pile_memory``.

        About 10% more piles with ``n_piles="auto"`` (unbiased: pile sizes say nothing of the
        order inside them); an error with a given number.

        Examples
        --------
        >>> layout = choose_layout(10_000, 8, 4, n_piles="auto", pile_nbytes=8_000, block_nbytes=20_000)
        >>> layout.n_piles, layout.after_overflow(8_008).n_piles
        (13, 14)
        """
        if self.n_piles_asked != "auto":
            more = max(auto_n_piles(self.n_rows, self.row_nbytes, self.pile_nbytes), self.n_piles + 1)
            got = (f"a planned pile of {largest_nbytes:,} bytes with ", Argument("n_piles", self.n_piles), " instead")
            raise _overflow_error(self.pile_nbytes, got, more)
        n_piles = max(self.n_piles + 1, int(self.n_piles * 1.1))
        if n_piles * MIN_PILE_ROWS > self.n_rows:
            # Piles of a few rows vary by more than their size: more of them overflow as often, without end.
            raise DaskShuffleValueError(
                (
                    "Expected ",
                    Argument("pile_memory"),
                    f" to hold piles of {MIN_PILE_ROWS} rows or more. Got {self.pile_nbytes:,} bytes for rows of "
                    f"{self.row_nbytes:,} bytes, whose drawn piles still overflow at {self.n_piles:,} piles for "
                    f"{self.n_rows:,} rows, instead; use a larger ",
                    Argument("pile_memory"),
                    ".",
                ),
                parameter="pile_memory",
            )
        return _bounded(replace(self, n_piles=n_piles, fanouts=choose_fanouts(self, n_piles)))


#: The fewest rows an ``n_piles="auto"`` pile is planned to hold on average: below it, re-planning stops.
MIN_PILE_ROWS = 8


def choose_layout(
    n_rows: int,
    row_nbytes: int,
    n_blocks: int,
    *,
    n_piles: int | Literal["auto"],
    pile_nbytes: int,
    block_nbytes: int,
    levels: int | Literal["auto"] = "auto",
    storage: Literal["local", "object"] = "local",
) -> Layout:
    """Piles and levels of a shuffle of ``n_rows`` rows of ``row_nbytes`` in ``n_blocks`` blocks.

    ``n_piles="auto"`` is the fewest piles whose mean plus six standard deviations fits
    ``pile_nbytes``; a given number is refused when even equal piles would not fit (a drawn pile
    that overflows is :meth:`Layout.after_overflow`'s). ``levels="auto"`` is
    :func:`~daskshuffle.plan._levels.auto_levels`'s choice.

    Raises
    ------
    DaskShuffleValueError
        When a row or ``n_piles`` piles do not fit ``pile_nbytes``, there are too few piles for
        ``levels``, or the plan does not fit :attr:`Layout.plan_budget`.

    Examples
    --------
    >>> layout = choose_layout(300_000, 72, 1, n_piles="auto", pile_nbytes=32 * 1024, block_nbytes=2**26)
    >>> layout.n_piles, layout.levels
    (873, 1)
    >>> choose_layout(300_000, 72, 1, n_piles=512, pile_nbytes=32 * 1024, block_nbytes=2**26)
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleValueError: Expected every pile to fit pile_memory (32,768 bytes). Got n_piles=512 ...
    """
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
    fewest = auto_n_piles(n_rows, row_nbytes, pile_nbytes)
    if n_piles == "auto" and n_rows >= MIN_PILE_ROWS * 2 and n_rows < MIN_PILE_ROWS * fewest:
        raise DaskShuffleValueError(
            (
                "Expected ",
                Argument("pile_memory"),
                f" to hold piles of {MIN_PILE_ROWS} rows or more on average. Got {pile_nbytes:,} bytes for rows of "
                f"{row_nbytes:,} bytes instead, which ",
                Argument("n_piles", "auto"),
                f" fills with {n_rows / fewest:.1f} rows a pile; use a larger ",
                Argument("pile_memory"),
                ".",
            ),
            parameter="pile_memory",
        )
    if n_piles != "auto" and -(-n_rows // n_piles) * row_nbytes > pile_nbytes:
        # Some pile holds at least the mean, whatever is drawn: refuse before drawing.
        average = f" instead, whose piles hold {round(n_rows / n_piles * row_nbytes):,} bytes on average"
        raise _overflow_error(pile_nbytes, (Argument("n_piles", n_piles), average), fewest)
    layout = Layout(
        n_rows=n_rows,
        row_nbytes=row_nbytes,
        n_blocks=n_blocks,
        block_nbytes=max(block_nbytes, 1),
        pile_nbytes=pile_nbytes,
        storage=storage,
        n_piles_asked=n_piles,
        levels_asked=levels,
        n_piles=fewest if n_piles == "auto" else n_piles,
        fanouts=(),
    )
    return _bounded(replace(layout, fanouts=choose_fanouts(layout, layout.n_piles)))


def _overflow_error(pile_nbytes: int, got: tuple[str | Argument, ...], n_piles: int) -> DaskShuffleValueError:
    """Piles larger than ``pile_nbytes`` (``got`` says which), and what to pass instead, as a command line spells it
    too: at least ``n_piles`` piles, or more memory a pile."""
    return DaskShuffleValueError(
        (
            "Expected every pile to fit ",
            Argument("pile_memory"),
            f" ({pile_nbytes:,} bytes). Got ",
            *got,
            "; use ",
            Argument("n_piles", n_piles),
            " or more, ",
            Argument("n_piles", "auto"),
            ", or a larger ",
            Argument("pile_memory"),
            ".",
        ),
        parameter="n_piles",
    )


def _bounded(layout: Layout) -> Layout:
    """``layout``, if its plan fits :attr:`Layout.plan_budget` on the client; else an error saying what would fit."""
    if layout.client_nbytes <= layout.plan_budget:
        return layout
    share = " (a thousandth of the data)" if layout.plan_budget > PLAN_NBYTES else ""
    blocks = f"{layout.n_blocks:,} block{'' if layout.n_blocks == 1 else 's'}"
    got = (
        f"n_piles={layout.n_piles:,}"
        if layout.n_piles_asked != "auto"
        else f"n_piles='auto', {layout.n_piles:,} piles of pile_memory={layout.pile_nbytes:,} bytes,"
    )
    need = (
        f"whose plan would take about {format_size(layout.client_nbytes)} (every block's count for every pile "
        f"{'of its super-pile ' if layout.fanouts else ''}and {PILE_CLIENT_NBYTES} bytes a pile)"
    )
    if layout.n_piles > layout.n_rows:
        need += f"; more piles than rows leave at least {layout.n_piles - layout.n_rows:,} of them empty"
    choices = []
    if layout.n_piles_asked != "auto":
        fewest = auto_n_piles(layout.n_rows, layout.row_nbytes, layout.pile_nbytes)
        if _fits(layout, fewest):
            choices.append(f"n_piles='auto' ({fewest:,} here)")
        most = _most_piles_that_fit(layout)
        if most >= fewest:
            choices.append(f"n_piles={min(most, max(layout.n_rows, fewest)):,} or fewer")
    else:
        choices.append("a larger pile_memory (fewer piles)")
    if layout.levels_asked != "auto" and _fits(replace(layout, levels_asked="auto"), layout.n_piles):
        choices.append("levels='auto'")
    if layout.n_blocks > 1:
        choices.append("a larger block_memory (fewer blocks)")
    use = " or ".join(choices) if len(choices) <= 2 else f"{', '.join(choices[:-1])}, or {choices[-1]}"
    raise DaskShuffleValueError(
        f"Expected a plan that takes at most {format_size(layout.plan_budget)}{share} on the client. Got {got} for "
        f"{layout.n_rows:,} rows in {blocks}, {need}, instead; use {use}.",
        parameter="n_piles",
    )


def _fits(layout: Layout, n_piles: int) -> bool:
    """Whether ``n_piles`` piles of ``layout``'s data, in the levels chosen for them, fit its plan budget."""
    try:
        fanouts = choose_fanouts(layout, n_piles)
    except DaskShuffleValueError:  # too few piles for the levels asked
        return False
    return replace(layout, n_piles=n_piles, fanouts=fanouts).client_nbytes <= layout.plan_budget


def _most_piles_that_fit(layout: Layout) -> int:
    """The most piles, below ``layout``'s, whose plan fits its budget: a search of arithmetic steps (0: none)."""
    low, high = 0, layout.n_piles  # low fits (or is 0), high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _fits(layout, middle) or middle < 2 ** len(layout.fanouts) * 2 else (low, middle)
    return low if low and _fits(layout, low) else 0


def choose_fanouts(layout: Layout, n_piles: int) -> tuple[int, ...]:
    """Each level's super-piles but the last's (none: one level) for ``n_piles`` piles of ``layout``'s data."""
    levels = layout.levels_asked
    if levels != "auto" and levels > 1 and n_piles < 2**levels:
        raise DaskShuffleValueError(
            (
                f"Expected {2**levels} piles or more for {levels} levels. Got ",
                Argument("n_piles", n_piles),
                " instead; use fewer ",
                Argument("levels"),
                ".",
            ),
            parameter="levels",
        )
    data, block = layout.data_nbytes, layout.block_nbytes
    n_levels = auto_levels(data, block, layout.n_blocks, n_piles, layout.storage) if levels == "auto" else levels
    return (fanout_for(data, block, n_piles, n_levels),) * (n_levels - 1)
