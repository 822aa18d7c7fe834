"""The orders a :class:`~daskshuffle.PileLoader` can yield an epoch in: one pure function each, in :data:`ORDERS`.

Every order has the signature ``order(pile_offsets, seed, epoch, divisions,
options) -> EpochOrder`` (:data:`~daskshuffle.plan._epoch_order.OrderFunction`):
from the store's pile offsets, the seed, the epoch, the cuts of the epoch's
stream between ranks (or lanes: MosaicML's canonical nodes) and the order's
:class:`~daskshuffle.plan._epoch_order.OrderOptions`, it gives the store row at
every position of the epoch's stream, and the positions where the loader's
reads start (:attr:`~daskshuffle.plan._epoch_order.EpochOrder.bounds`). The
loader cuts that stream between ranks and batches exactly as it cuts
``"piles"``; a read holds the rows of one unit ``bounds[u]:bounds[u + 1]`` at
once, reading them from the store in runs
(:func:`~daskshuffle.plan._epoch_order.unit_reads`). Pure numpy, like
:mod:`daskshuffle.plan._epoch_plan`: no I/O, no dask, no zarr. Randomness comes
only from :func:`~daskshuffle._random.make_rng` keyed by ``(seed, purpose, epoch, ...)``.

The *sample space* of an epoch is the piles laid end to end in the epoch's
visiting order (:func:`~daskshuffle.plan._epoch_plan.epoch_pile_order`), each in
stored order. A pile plays the part of a MosaicML shard, or of a tf.data file.
The orders that shuffle stretches of it are in
:mod:`~daskshuffle.plan._mosaic_orders`, tf.data's buffer orders in
:mod:`~daskshuffle.plan._buffer_orders`, and the order objects users pass in
:mod:`~daskshuffle.plan._order_classes`.
"""

from __future__ import annotations

from ._buffer_orders import buffer, interleave
from ._epoch_order import OrderFunction
from ._mosaic_orders import naive, piles, py1b, py1br, py1e, py1s, py2s

__all__ = ["ORDERS", "ORDER_OPTIONS", "READ_GAPS"]


#: Every order, by name: one pure function each, with one signature.
ORDERS: dict[str, OrderFunction] = {
    "piles": piles,
    "naive": naive,
    "py1s": py1s,
    "py2s": py2s,
    "py1b": py1b,
    "py1br": py1br,
    "py1e": py1e,
    "buffer": buffer,
    "interleave": interleave,
}
#: Rows a read may take between two rows its unit needs, by order (others: :data:`~daskshuffle.plan._epoch_order.READ_GAP`). The units of these
#: orders are stretches of the sample space, read exactly: rows between two of their runs belong to other units.
READ_GAPS: dict[str, int] = {"py1s": 0, "py1b": 0, "py1br": 0}
#: The options each order needs.
ORDER_OPTIONS: dict[str, tuple[str, ...]] = {
    "piles": (),
    "naive": (),
    "py1s": (),
    "py2s": (),
    "py1b": ("shuffle_block_size",),
    "py1br": ("shuffle_block_size",),
    "py1e": ("shuffle_block_size",),
    "buffer": ("buffer_size",),
    "interleave": ("buffer_size", "cycle_length"),
}
