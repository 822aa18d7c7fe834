"""The loader's plan: which rows an epoch yields, in which order, to which rank (pure numpy, no I/O).

Exports what the loader, the quality measures and ``torch.py`` use.
"""

from ._epoch_plan import (
    BatchPlan,
    lane_ranges,
    n_batches,
    plan_batches,
    rank_share,
    split_batches,
)
from ._order_classes import Order, OrderName, Piles, check_combination, parse_order
from ._orders import ORDERS, READ_GAPS, EpochOrder, buffer_stream, division_cuts, interleave_stream, unit_reads
from ._streams import Stream, epoch_counts, parse_streams, stream_offsets
from ._unit_plan import (
    apart,
    auto_budget,
    deal_groups,
    epoch_runs,
    group_permutation,
    unit_bounds,
    unit_excess,
    unit_rows_for,
    unit_sizes,
)

__all__ = [
    "ORDERS",
    "READ_GAPS",
    "BatchPlan",
    "EpochOrder",
    "Order",
    "OrderName",
    "Piles",
    "Stream",
    "apart",
    "auto_budget",
    "buffer_stream",
    "check_combination",
    "deal_groups",
    "division_cuts",
    "epoch_counts",
    "epoch_runs",
    "group_permutation",
    "interleave_stream",
    "lane_ranges",
    "n_batches",
    "parse_order",
    "parse_streams",
    "plan_batches",
    "rank_share",
    "split_batches",
    "stream_offsets",
    "unit_bounds",
    "unit_excess",
    "unit_reads",
    "unit_rows_for",
    "unit_sizes",
]
