"""Reading pile stores for training: epochs, orders, read-ahead, batches, ranks, lanes, mixtures."""

from ._loader import CacheNotUsedWarning, LoaderSettings, PileLoader

__all__ = ["CacheNotUsedWarning", "LoaderSettings", "PileLoader"]
