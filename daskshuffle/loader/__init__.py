"""Reading pile stores for training: epochs, orders, read-ahead, batches, ranks, lanes, mixtures."""

from ._loader import LoaderSettings, PileLoader

__all__ = ["LoaderSettings", "PileLoader"]
