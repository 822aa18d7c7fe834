"""The one door through which randomness enters daskshuffle.

Every generator is a :class:`numpy.random.SeedSequence` keyed by the seed, a purpose and a few
integers: nothing random depends on workers, task order or retries, and two purposes never share a
stream (``seed=1, epoch=0`` and ``seed=0, epoch=1`` are unrelated).
"""

from __future__ import annotations

import secrets
import zlib

import numpy as np

__all__ = ["draw_seed", "make_rng"]

MAX_SEED = 2**63 - 1


def make_rng(seed: int, purpose: str, *key: int) -> np.random.Generator:
    """Return the generator for ``(seed, purpose, *key)``.

    Each purpose must always be called with the same number of key integers.

    Examples
    --------
    >>> a = make_rng(0, "rows", 3).integers(0, 100, 5)
    >>> b = make_rng(0, "rows", 3).integers(0, 100, 5)
    >>> bool((a == b).all())
    True
    """
    purpose_code = zlib.crc32(purpose.encode("utf-8"))  # stable across processes and platforms, unlike hash()
    sequence = np.random.SeedSequence(seed, spawn_key=(purpose_code, *map(int, key)))
    return np.random.default_rng(sequence)


def draw_seed() -> int:
    """Draw a fresh seed from the operating system, to be recorded with the output.

    Examples
    --------
    >>> seed = draw_seed()
    >>> 0 <= seed <= MAX_SEED
    True
    """
    return secrets.randbits(63)
