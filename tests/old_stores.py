"""Pile stores as daskshuffle wrote them before piles were stored shuffled: each pile in source order, no flag,
format version 2 (no run, no binding of chunks to their places).

Made from a store of today by undoing each pile's drawn order (the merge's
``(seed, "materialize", pile)`` permutation): the same bytes an earlier release
wrote, so that tests of the behaviour such stores keep compare with the orders
recorded then.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

from daskshuffle._random import make_rng
from daskshuffle.pilestore._metadata import BOUND_KEYS
from daskshuffle.plan import PILES_SHUFFLED, fingerprint

METADATA_KEY = "daskshuffle"
ADDED_AFTER_FINGERPRINT = ("layout", "dim")


def as_written_before_shuffled_piles(store: str | Path) -> None:
    """Rewrite the Zarr pile store at ``store`` as an earlier release wrote it: piles in source order, no flag."""
    group = zarr.open_group(str(store), mode="r+")
    metadata = dict(group.attrs[METADATA_KEY])
    assert metadata.pop(PILES_SHUFFLED) is True, "a store of this release"
    for key in BOUND_KEYS:  # version 2 bound no chunk to its run and place
        metadata.pop(key, None)
    metadata["format_version"] = 2
    offsets, seed = metadata["pile_offsets"], int(metadata["seed"])
    for name in metadata["variables"]:
        array = group[name]
        values = array[...]
        for pile in range(len(offsets) - 1):
            a, b = offsets[pile], offsets[pile + 1]
            if b - a > 1:
                unshuffled = np.empty_like(values[a:b])
                unshuffled[make_rng(seed, "materialize", pile).permutation(b - a)] = values[a:b]
                values[a:b] = unshuffled
        array[...] = values
    recorded = {k: v for k, v in metadata.items() if k not in ("fingerprint", *ADDED_AFTER_FINGERPRINT)}
    metadata["fingerprint"] = fingerprint({**recorded, "complete": False})
    group.attrs[METADATA_KEY] = metadata
