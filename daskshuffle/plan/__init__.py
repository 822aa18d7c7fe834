"""The shuffle's plan: where every row goes, decided in pure numpy before any byte is read.

Exports what the shuffles, the stores, the sources, the loader and the command line use.
"""

from ._level_plan import GroupedLevel, LevelPlan, block_table, make_level_plan, piece_offsets, span_reads
from ._levels import MIN_READ_NBYTES
from ._plan import (
    Plan,
    ShuffleSettings,
    block_counts,
    block_order,
    block_rows,
    fingerprint,
    group_order,
    make_plan,
    merge_runs,
    split_piles,
)
from ._rules import Layout, choose_layout
from ._scale import DEFAULT_MIN_READ, DEFAULT_N_PILES

__all__ = [
    "DEFAULT_MIN_READ",
    "DEFAULT_N_PILES",
    "MIN_READ_NBYTES",
    "GroupedLevel",
    "Layout",
    "LevelPlan",
    "Plan",
    "ShuffleSettings",
    "block_counts",
    "block_order",
    "block_rows",
    "block_table",
    "choose_layout",
    "fingerprint",
    "group_order",
    "make_level_plan",
    "make_plan",
    "merge_runs",
    "piece_offsets",
    "span_reads",
    "split_piles",
]
