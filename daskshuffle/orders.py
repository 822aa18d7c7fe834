"""The orders a :class:`~daskshuffle.PileLoader` yields its epochs in, each with its own options.

Pass one as ``order=``; the orders that need no options may be named by a
string instead (``order="py1s"``). Piles play the part of MosaicML
Streaming's shards and of tf.data's files, and the ranks (or lanes) that of
MosaicML's canonical nodes. Memory is given as what a read holds, the loader
holding the read in use and those read ahead (``PileLoader(prefetch=)``: by
default one):

- :class:`Piles` (``"piles"``, the default): units of whole chunks dealt
  afresh each epoch into groups under one byte budget (``budget="auto"``),
  each group mixed in memory; a group, half the budget.
- :class:`Naive` (``"naive"``): one uniform permutation of all rows; each rank
  holds every pile it has a row of: for small data only.
- :class:`Py1s` (``"py1s"``): piles in a random order, the stream cut between
  ranks, each pile or part of a pile shuffled alone; a pile.
- :class:`Py2s` (``"py2s"``): like :class:`Py1s`, but a boundary pile is
  shuffled before it is cut, then again; a pile.
- :class:`Py1b`: each rank's stream cut into blocks of ``shuffle_block_size``
  rows, each block shuffled; a block.
- :class:`Py1br`: :class:`Py1b` with block sizes drawn in ``[0.75, 1.25) *
  shuffle_block_size`` and each rank's first block cut short; up to 1.25 blocks.
- :class:`Py1e`: each pile's rows spread at random over its place extended to
  ``shuffle_block_size`` rows; about 2 blocks, rows read about twice.
- :class:`Buffer`: piles in a random order, each in stored order, through
  tf.data's shuffle buffer of ``buffer_size`` rows; about 9 buffers, rows read
  about twice.
- :class:`Interleave`: ``cycle_length`` piles read a row each in turn into the
  buffer; as :class:`Buffer`.

Every order but :class:`Piles` plans each epoch whole: 8 bytes a row, and for
:class:`Buffer` and :class:`Interleave` about a second per million rows.

Examples
--------
>>> import daskshuffle as ds
>>> order = ds.orders.Py1b(shuffle_block_size=400)
>>> with ds.PileLoader("piles.zarr", batch_size=100, seed=0, order=order) as loader:
...     ids = [int(i) for batch in loader for i in batch["id"]]
>>> sorted(ids) == list(range(1000)), loader.settings.order, loader.settings.shuffle_block_size
(True, 'py1b', 400)
"""

from __future__ import annotations

from .epochs._order_classes import Buffer, Interleave, Naive, Order, Piles, Py1b, Py1br, Py1e, Py1s, Py2s

__all__ = ["Buffer", "Interleave", "Naive", "Order", "Piles", "Py1b", "Py1br", "Py1e", "Py1s", "Py2s"]
