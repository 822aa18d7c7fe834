"""The orders a :class:`~daskshuffle.PileLoader` yields its epochs in, each with its own options.

Pass one as ``order=``; the orders that need no options may be named by a string instead
(``order="py1s"``). :class:`Piles` is the loader's own (the default); :class:`Naive` is one uniform
permutation; :class:`Py1s`, :class:`Py2s`, :class:`Py1b`, :class:`Py1br` and :class:`Py1e` are
MosaicML Streaming's, piles playing the part of shards; :class:`Buffer` and :class:`Interleave` are
tf.data's, piles playing the part of files. Each class says what a read holds. Every order but
:class:`Piles` plans each epoch whole, 8 bytes a row.

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
