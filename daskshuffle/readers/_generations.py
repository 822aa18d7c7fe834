"""A Zarr pile store with several generations (:mod:`daskshuffle.pilestore`), read as one store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..formats import ArrayRows
from ..pilestore import GENERATIONS_KEY, generation_location, metadata_disagrees, read_root
from ..storage import Location
from ._opened import Opened
from ._pile_reader import ComposedReader
from ._zarr_reader import ZarrPileReader

__all__ = ["GenerationsReader"]


class GenerationsReader(ComposedReader[ArrayRows]):
    """A Zarr pile store with several generations, read as one: pile ``p`` is pile ``p`` of each, oldest first.

    Examples
    --------
    >>> reader = GenerationsReader("window.zarr")  # raw.zarr, then day-2.zarr appended
    >>> reader.n_rows, len(reader.members)
    (2000, 2)
    """

    kind, batch_formats = ZarrPileReader.kind, ZarrPileReader.batch_formats  # as its generations' readers

    def _open(
        self, location: Location, variables: Sequence[str] | None, *, metadata: Mapping[str, Any] | None = None
    ) -> None:
        self.metadata = read_root(location, metadata)
        # A generation the root listed, gone or replaced since (compact, evict): no damage, a store that changed.
        root = Opened.of(location, self.metadata)
        with root.unchanged(self.store):
            self.members = [
                ZarrPileReader(
                    generation_location(location, entry["path"]),
                    variables,
                    batch_format=self.batch_format,
                    metadata=entry.get("metadata"),
                    opened=root,  # a failed read looks at the root, which lists the generations
                )
                for entry in self.metadata[GENERATIONS_KEY]
            ]
            self._check_generations()

    def _check_generations(self) -> None:
        """Refuse a root whose list of generations disagrees with the generations' own metadata or its offsets."""
        for entry, reader in zip(self.metadata[GENERATIONS_KEY], self.members, strict=True):
            for key in ("n_rows", "fingerprint"):
                if entry.get(key) != reader.metadata.get(key):
                    raise metadata_disagrees(
                        self.store,
                        f"the {key} it lists for generation {entry.get('generation')} to be the generation's own",
                        f"{key} = {entry.get(key)!r} listed and {reader.metadata.get(key)!r} in {reader.store!r}",
                    )
        sizes = [np.diff(reader.pile_offsets) for reader in self.members]
        if any(len(size) != len(sizes[0]) for size in sizes):
            raise metadata_disagrees(
                self.store,
                "generations of one number of piles",
                f"n_piles = {', '.join(str(len(size)) for size in sizes)} in its generations",
            )
        summed = np.concatenate([[0], np.cumsum(sum(sizes))]).astype(np.int64)
        offsets = self.pile_offsets
        differ = (
            np.flatnonzero(offsets != summed)
            if len(offsets) == len(summed)
            else np.array([min(len(offsets), len(summed)) - 1])
        )
        if differ.size:
            at = int(differ[0])
            raise metadata_disagrees(
                self.store,
                "pile_offsets that add up its generations' piles",
                f"pile_offsets[{at}] = {int(offsets[at]):,} and {int(summed[at]):,} from its generations",
            )
