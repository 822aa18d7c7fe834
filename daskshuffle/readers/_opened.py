"""A pile store's root as a reader opened it: a read that fails looks whether the store changed since."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import CorruptPileStoreError, IncompletePileStoreError, StoreChangedError
from ..pilestore import RUN_KEY, read_metadata
from ..storage import Location

__all__ = ["Opened"]


@dataclass(frozen=True)
class Opened:
    """A pile store's root as a reader opened it: its run and fingerprint, looked at again when a read fails.

    A read that fails because the store was shuffled again (``overwrite=True``),
    or its generations changed (``compact``, ``evict``), is told from damage.
    """

    root: Location
    run: str | None
    fingerprint: str | None

    @classmethod
    def of(cls, root: Location, metadata: Mapping[str, Any]) -> Opened:
        run, found = metadata.get(RUN_KEY), metadata.get("fingerprint")
        return cls(root, None if run is None else str(run), None if found is None else str(found))

    def changed(self) -> str | None:
        """What the root holds now if it is not the store opened, else ``None`` (also if it cannot be read now)."""
        try:
            now = read_metadata(self.root)
        except OSError:
            return None
        if now is None:
            return "no pile store there now"
        if now.get(RUN_KEY) == self.run and now.get("fingerprint") == self.fingerprint:
            return None
        listed = [entry.get("generation") for entry in now.get("generations", [])]
        if listed or now.get(RUN_KEY) == self.run:
            return f"a store whose generations changed since (now generations {listed or [0]}: evict or compact)"
        return f"a store shuffled again since (run {now.get(RUN_KEY)!r}, where the reader opened run {self.run!r})"

    @contextlib.contextmanager
    def unchanged(self, store: str) -> Iterator[None]:
        """Raise damage met in the body (a file gone, metadata that disagrees) as :class:`StoreChangedError` if the
        root is no longer the store opened (:meth:`changed`): a new shuffle, ``compact`` or ``evict`` is no damage."""
        try:
            yield
        except StoreChangedError:
            raise
        except (IncompletePileStoreError, CorruptPileStoreError) as error:
            changed = self.changed()
            if changed is None:
                raise
            raise StoreChangedError(
                f"Expected pile store {store!r} as it was opened. Got {changed} instead ({error}); open a new "
                "PileLoader (or reader) to read the store as it is now."
            ) from error
