"""A loader's settings and the checks of a saved state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .._errors import DaskShuffleValueError
from .._parse import Settings, parse_count
from ..plan import fingerprint
from ..readers import PileReader

__all__ = ["STATE_VERSION", "LoaderSettings", "check_state", "differences", "parse_rank", "row_nbytes"]

#: Version of the dict that :meth:`PileLoader.state_dict` returns.
STATE_VERSION = 1
STATE_KEYS = ("version", "epoch", "batches", "store", "settings", "settings_fingerprint")


@dataclass(frozen=True, repr=False)
class LoaderSettings(Settings):
    """What decides which rows a loader yields and how they are cut into batches.

    Two loaders of one store with equal settings yield the same batches in
    every epoch; their fingerprint goes into :meth:`PileLoader.state_dict`.
    ``prefetch``, ``variables`` and ``cache`` change how rows are read, not
    which, and are left out. Only what is in force is shown: for
    ``order="piles"`` the rows of a unit and of a group (from the budget), for
    the other orders their own options.

    Examples
    --------
    >>> settings = LoaderSettings(batch_size=32, seed=0, rank=0, world_size=1, drop_last=False, unit_rows=8192,
    ...                           group_rows=262144)
    >>> settings
    LoaderSettings(batch_size=32, seed=0, rank=0, world_size=1, drop_last=False, order='piles', unit_rows=8192, group_rows=262144)
    >>> LoaderSettings.from_dict(settings.to_dict()) == settings
    True
    """

    batch_size: int
    seed: int
    rank: int
    world_size: int
    drop_last: bool
    n_lanes: int | None = None
    order: str = "piles"
    shuffle_block_size: int | None = None
    buffer_size: int | None = None
    cycle_length: int | None = None
    #: Rows of a unit and (at most) of a group of them: what ``order="piles"`` reads.
    unit_rows: int | None = None
    group_rows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: value for name, value in super().to_dict().items() if value is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoaderSettings:
        unset = {field.name: None for field in fields(cls) if field.default is None}
        return super().from_dict({**unset, **data} if isinstance(data, Mapping) else data)

    def __repr__(self) -> str:
        return f"LoaderSettings({', '.join(f'{name}={value!r}' for name, value in self.to_dict().items())})"

    def deciding(self) -> dict[str, Any]:
        """What decides the batches a state's position points at: with lanes, not the rank nor the number of ranks."""
        data = self.to_dict()
        if self.n_lanes is None:
            return data
        del data["rank"], data["world_size"], data["batch_size"]
        return {**data, "global_batch_size": self.batch_size * self.world_size}

    @property
    def divisions(self) -> tuple[int, int]:
        """How each epoch's stream is cut: into ranks of batches, or into lanes of micro-batches (how many, what batch)."""
        if self.n_lanes is None:
            return self.world_size, self.batch_size
        return self.n_lanes, self.batch_size * self.world_size // self.n_lanes

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.deciding())


def parse_rank(rank: object, world_size: int) -> int:
    rank = parse_count(rank, "rank")
    if rank >= world_size:
        raise DaskShuffleValueError(
            f"Expected rank to lie in [0, world_size) = [0, {world_size}). Got {rank} instead; "
            "ranks are numbered from 0, as in torch.distributed."
        )
    return rank


def row_nbytes(reader: PileReader[Any]) -> float:
    """Bytes a row of ``reader`` takes in memory: from the dtypes, or from a sample of rows where sizes vary."""
    empty = reader.empty()
    if isinstance(empty, dict) and all(values.dtype.kind != "O" for values in empty.values()):
        return float(sum(values.dtype.itemsize * int(np.prod(values.shape[1:])) for values in empty.values()))
    n_rows = min(reader.n_rows, 256)
    return reader.rows.nbytes(reader.read_rows(0, n_rows)) / max(n_rows, 1)


def differences(saved: Mapping[str, Any], here: Mapping[str, Any]) -> str:
    """What a saved state holds other than this loader, key by key: ``"seed: saved 3, here 4; ..."``."""
    differ = [name for name in dict.fromkeys([*saved, *here]) if saved.get(name) != here.get(name)]
    return "; ".join(f"{name}: saved {saved.get(name)!r}, here {here.get(name)!r}" for name in differ)


def check_state(
    state: object, store: str, store_fingerprint: str, settings: LoaderSettings, n_batches: int
) -> tuple[int, int]:
    """The position ``(epoch, batches)`` a saved ``state`` continues from, if this loader may continue it."""
    # Several streams are recorded too ("streams", checked by check_streams).
    if not isinstance(state, Mapping) or sorted(k for k in state if k != "streams") != sorted(STATE_KEYS):
        raise DaskShuffleValueError(
            f"Expected a dict returned by PileLoader.state_dict(), with the keys {list(STATE_KEYS)}. "
            f"Got {state!r} instead."
        )
    if state["version"] != STATE_VERSION:
        raise DaskShuffleValueError(
            f"Expected a loader state of version {STATE_VERSION}. Got version {state['version']!r} instead."
        )
    if state["store"] != store_fingerprint:
        raise DaskShuffleValueError(
            f"Expected a state saved by a loader of {store!r} (store fingerprint {store_fingerprint}). "
            f"Got a state of another store (fingerprint {state['store']!r}) instead; load it into a loader of "
            "the store it was saved with."
        )
    saved = LoaderSettings.from_dict(state["settings"])
    if saved.deciding() != settings.deciding() or state["settings_fingerprint"] != settings.fingerprint:
        raise DaskShuffleValueError(
            "Expected a state saved with this loader's settings. Got a state whose settings differ "
            f"({differences(saved.deciding(), settings.deciding()) or 'fingerprint'}) "
            "instead; create the loader with the saved settings, or start a new run at an epoch boundary "
            f"with set_epoch({state['epoch'] + (state['batches'] > 0)})."
        )
    epoch = parse_count(state["epoch"], "the state's epoch")
    batches = parse_count(state["batches"], "the state's batches")
    if batches > n_batches:
        raise DaskShuffleValueError(
            f"Expected the state's batches to be at most {n_batches}, the batches per epoch. Got {batches} instead."
        )
    return epoch, batches
