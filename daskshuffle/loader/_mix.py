"""A loader over several pile stores at once: their readers as one, the streams in its state.

The loader reads a mixture as it reads one store: units of each store (none
crossing from one store to the next), each stream's copies of its units and a
sample of them, dealt together into groups under the budget.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._errors import DaskShuffleValueError
from .._parse import parse_path
from ..epochs import Stream, epoch_counts, stream_offsets
from ..plan import fingerprint
from ..readers import ComposedReader, PileReader, open_pile_reader
from ..storage import Location
from ._loader_state import differences

__all__ = ["Mixture", "check_streams", "open_loader_store"]


class MixedReader(ComposedReader[Any]):
    """The pile stores ``readers`` read as one: rows (and piles) of each after those of the ones before it."""

    def __init__(self, readers: Sequence[PileReader[Any]]) -> None:
        self.members = list(readers)
        offsets = stream_offsets([reader.pile_offsets for reader in readers])
        self.starts = np.concatenate([[0], np.cumsum([reader.n_rows for reader in readers])]).astype(np.int64)
        self.metadata = {
            **readers[0].metadata,
            "n_rows": int(self.starts[-1]),
            "n_piles": len(offsets) - 1,
            "pile_offsets": offsets.tolist(),
            "fingerprint": fingerprint([reader.metadata["fingerprint"] for reader in readers]),
        }

    @functools.cached_property
    def segments(self) -> NDArray[np.int64]:
        """Each store's rows, after those of the stores before it."""
        sizes = np.diff(self.starts)
        members = np.arange(len(sizes))
        return np.stack([self.starts[:-1], np.zeros_like(sizes), sizes, members], axis=1).astype(np.int64)


@dataclass(frozen=True)
class Mixture:
    """The streams of a loader, their rows per epoch, and what its state records of them."""

    reader: MixedReader
    counts: list[int]
    records: list[dict[str, Any]]


def _check_alike(paths: Sequence[str], readers: Sequence[PileReader[Any]]) -> None:
    kinds = [str(reader.metadata["kind"]) for reader in readers]
    schemas = [reader.rows.schema(reader.read_rows(0, 0)) for reader in readers]
    for path, kind, schema in zip(paths[1:], kinds[1:], schemas[1:], strict=True):
        if kind != kinds[0]:
            raise DaskShuffleValueError(
                f"Expected every store to be a {kinds[0]} pile store, as {paths[0]!r} is. Got a {kind} pile store "
                f"{path!r} instead; shuffle the stores to one kind.",
                parameter="store",
            )
        if schema != schemas[0]:
            first = schemas[0]
            differ = [
                f"{name}: {first.get(name, 'missing')} in {paths[0]!r}, {schema.get(name, 'missing')} in {path!r}"
                for name in sorted({*first, *schema})
                if first.get(name) != schema.get(name)
            ]
            raise DaskShuffleValueError(
                f"Expected every store to have the same variables with the same dtypes. Got {'; '.join(differ)} "
                "instead; pass variables= to read only the ones they share.",
                parameter="store",
            )


def open_loader_store(
    store: object,
    streams: list[Stream] | None,
    variables: list[str] | None,
    storage_options: dict[str, Any] | None,
    batch_format: str,
) -> tuple[str, PileReader[Any], Mixture | None]:
    """What a loader reads: the store's name, its reader, and for several ``streams`` their :class:`Mixture`.

    Every stream's store is opened and checked (same kind, variables and dtypes) before any row is read.
    """
    if streams is None:
        path = parse_path(store, "store")
        return path, open_pile_reader(Location.of(path, storage_options), variables, batch_format=batch_format), None
    paths = [os.fspath(stream.store) for stream in streams]
    readers: list[PileReader[Any]] = []
    try:
        for path in paths:
            readers.append(open_pile_reader(Location.of(path, storage_options), variables, batch_format=batch_format))
        _check_alike(paths, readers)
        counts = epoch_counts(streams, [reader.n_rows for reader in readers])
        for path, reader, count in zip(paths, readers, counts, strict=True):
            if reader.n_rows == 0 and count > 0:
                raise DaskShuffleValueError(
                    f"Expected rows in {path!r} to choose {count} from. Got an empty store instead.", parameter="store"
                )
    except BaseException:
        for reader in readers:
            reader.close()
        raise
    records = [
        {**stream.to_dict(), "fingerprint": str(reader.metadata["fingerprint"]), "rows_per_epoch": count}
        for stream, reader, count in zip(streams, readers, counts, strict=True)
    ]
    mixture = Mixture(MixedReader(readers), counts, records)
    return " + ".join(paths), mixture.reader, mixture


def check_streams(state: object, records: list[dict[str, Any]] | None) -> None:
    """Refuse a state saved with other streams (stores or weights) than ``records``, naming the streams that differ."""
    saved = state.get("streams") if isinstance(state, Mapping) else None
    if saved == records:
        return
    if saved is None or records is None:
        raise DaskShuffleValueError(
            f"Expected a state saved by a loader of {'several streams' if records else 'one store'}. Got a state of "
            f"{'several streams' if saved else 'one store'} instead; load it into a loader like the one that saved it."
        )
    differ = differences(
        {f"stream {i}": stream for i, stream in enumerate(saved)},
        {f"stream {i}": stream for i, stream in enumerate(records)},
    )
    raise DaskShuffleValueError(
        f"Expected a state saved with this loader's streams. Got a state whose streams differ ({differ}) "
        "instead; create the loader with the saved streams and weights."
    )
