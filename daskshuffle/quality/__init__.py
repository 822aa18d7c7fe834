"""Shuffle quality you can measure and see, for daskshuffle's orders and for anyone else's.

An *order* is the source position of every row a loader yields, in the order it yields them (for
a store with an ``id`` variable, one epoch's ids). :func:`report` measures it at several scales next
to a uniform shuffle of the same size; :func:`plot_hilbert` and :func:`plot_orders` draw it;
:mod:`daskshuffle.quality.orders` makes reference orders, other loaders' and daskshuffle's, without data.

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
