"""Shuffles built on shuffles: the generations of a pile store (``append``, ``evict``, ``compact``) and a
fresh pile store for every epoch (``EpochShuffler``). Each writes through :mod:`daskshuffle.shuffle`.
"""

from ._generations import clean_generations, generation_leftovers

__all__ = ["clean_generations", "generation_leftovers"]
