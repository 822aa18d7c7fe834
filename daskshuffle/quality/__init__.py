"""Shuffle quality you can measure and see, for daskshuffle's orders and for anyone else's.

An *order* is the source position of every row a loader yields, in the order
it yields them: for a pile store with an ``id`` variable, the ids of one
epoch. :func:`report` measures it at several scales, each measure next to
what a uniform shuffle of the same size gives (expected value and a band of
five standard deviations), so it reads "as uniform" or "not uniform, at this
scale". :func:`plot_hilbert` and :func:`plot_orders` draw it. The module
:mod:`daskshuffle.quality.orders` makes reference orders without data: no
shuffle, a uniform shuffle, a shuffle buffer, interleaved files, shard-local
shuffles, and :class:`~daskshuffle.PileLoader`'s own (:func:`~daskshuffle.quality.orders.piles`:
units of a pile store dealt into groups under a budget).

Examples
--------
>>> from daskshuffle import quality
>>> from daskshuffle.quality import orders
>>> table = quality.report(orders.uniform(100_000, seed=1), batch_size=1024)
>>> sorted(set(table["verdict"]))
['as uniform']
>>> table = quality.report(orders.shuffle_buffer(100_000, buffer_size=1000), batch_size=1024)
>>> table.set_index(["metric", "scale"]).loc[("spread", "batch"), "verdict"]
'not uniform'
"""

from . import orders
from ._pictures import plot_heatmap, plot_hilbert, plot_orders
from ._report import report, summary

__all__ = ["orders", "plot_heatmap", "plot_hilbert", "plot_orders", "report", "summary"]
