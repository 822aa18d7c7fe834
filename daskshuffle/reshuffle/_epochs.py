"""A fresh full shuffle for every epoch, made while the epoch before it trains.

Reshuffling piles each epoch (what :class:`~daskshuffle.PileLoader` does) keeps
the rows of a pile together from one epoch to the next; :class:`EpochShuffler`
shuffles the source again for every epoch, into its own pile store, in the background.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .._errors import DaskShuffleTypeError, DaskShuffleValueError, UnfinishedShuffleError
from .._parse import parse_count, parse_path, parse_positive_int, parse_seed
from .._random import make_rng
from .._threads import release_on_collection
from ..loader import PileLoader
from ..shuffle import ShuffleResult
from ..storage import Location, exclusive, normalize

__all__ = ["EpochShuffler", "epoch_seed"]

#: How long a rank other than 0 waits for rank 0 to finish an epoch's store.
WAIT_SECONDS = 3600.0


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s shuffle: drawn from ``(seed, "epoch-shuffle", epoch)``, never ``seed + epoch``."""
    return int(make_rng(seed, "epoch-shuffle", epoch).integers(0, 2**63 - 1))


def parse_forwarded_options(shuffle: Callable[..., Any], options: object) -> dict[str, Any]:
    """``shuffle_options`` for ``shuffle``, checked now rather than when it runs: its parameters, but not the seed
    and ``overwrite``, which the shuffler chooses.

    Examples
    --------
    >>> def shuffle(src, dst, n_piles=512, *, seed=None, overwrite=False): ...
    >>> parse_forwarded_options(shuffle, {"n_pile": 8})
    Traceback (most recent call last):
    ...
    daskshuffle._errors.DaskShuffleTypeError: Expected shuffle_options to hold arguments of shuffle. Got ['n_pile'] instead; ...
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(name, str) for name in options):
        raise DaskShuffleTypeError(
            f"Expected shuffle_options to be a dict of arguments. Got {options!r} instead.", parameter="shuffle_options"
        )
    for name in ("seed", "overwrite"):
        if name in options:
            raise DaskShuffleValueError(
                f"Expected shuffle_options without {name!r}. Got it instead; the shuffler chooses each epoch's seed "
                "and store.",
                parameter="shuffle_options",
            )
    taken = inspect.signature(shuffle).parameters
    if not any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in taken.values()):
        unknown = sorted(set(options) - set(taken))
        if unknown:
            raise DaskShuffleTypeError(
                f"Expected shuffle_options to hold arguments of {getattr(shuffle, '__name__', 'the shuffle')}. Got "
                f"{unknown} instead; it takes {[name for name in taken if name not in ('src', 'dst')]}.",
                parameter="shuffle_options",
            )
    return dict(options)


def _next_batch(epoch: int, loader: dict[str, Any] | None) -> tuple[int, dict[str, Any] | None]:
    """The shuffler's epoch and its loader's state that come next: a loader past its one epoch has handed out the
    shuffler's epoch whole, and the next batch is the first of the shuffler's next epoch."""
    if loader is not None and parse_count(loader.get("epoch"), "the loader state's epoch") > 0:
        return epoch + 1, None
    return epoch, loader


class _Work:
    """What an :class:`EpochShuffler` made and runs: its stores, its thread and the loader being read.

    Apart from the shuffler, so that a finalizer can remove it all once the shuffler is garbage collected.
    """

    def __init__(self, workdir: Location, rank: int, world_size: int) -> None:
        self.workdir = workdir
        self.rank = rank
        self.world_size = world_size
        self.loader: PileLoader | None = None
        self.made: dict[int, Future[ShuffleResult]] = {}
        self.removing: list[Future[None]] = []
        self.closing = threading.Event()
        self.broken_off = True
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="daskshuffle-epochs")
        #: Rank 0's lock of the workdir, held until close: one shuffler makes and removes the stores there.
        self.held = contextlib.ExitStack()

    def store(self, epoch: int) -> Location:
        return self.workdir.join(f"epoch-{epoch:05d}.zarr")

    def marker(self, epoch: int) -> Location:
        """Where the other ranks mark that they read ``epoch``."""
        return self.workdir.join(f"epoch-{epoch:05d}.read")

    def remove_when_read(self, epoch: int) -> None:
        """Wait until every rank has read ``epoch``, then remove its store."""
        marker = self.marker(epoch)
        deadline = time.monotonic() + WAIT_SECONDS
        others = {f"rank-{rank}" for rank in range(1, self.world_size)}
        while others and not self.closing.is_set():  # the other ranks may still read their last piles
            others -= set(marker.names(fresh=True))
            if others and time.monotonic() > deadline:
                raise DaskShuffleValueError(
                    f"Expected every rank to finish epoch {epoch} within {WAIT_SECONDS:.0f} s. Got no word "
                    f"from {sorted(others)} instead; do all ranks iterate the same epochs?"
                )
            if others:  # other processes, often on other machines, that share only storage: it is polled
                self.closing.wait(0.05)  # a close ends the wait at once
        marker.remove()
        self.store(epoch).remove()

    def close(self) -> None:
        """Remove every store its shuffles made (only those), once the other ranks have read them (unless broken
        off); join the thread."""
        if self.loader is not None:
            self.loader.close()
            self.loader = None
        if self.broken_off:  # the other ranks are not waited for
            self.closing.set()
        for future in self.made.values():
            future.cancel()
        self.pool.shutdown(wait=True)  # pending removals run; the pending shuffles were cancelled above
        removing, self.removing = self.removing, []
        if self.rank == 0:  # the stores its shuffles made; a shuffle refused (a directory of the user's) made none
            for epoch, future in self.made.items():
                if not future.cancelled() and future.exception() is None:
                    self.store(epoch).remove()
                    self.marker(epoch).remove()
            if self.workdir.is_local:  # an empty directory (an object store has none, and a bucket is never removed)
                with contextlib.suppress(OSError):
                    os.rmdir(self.workdir.path)
        self.made.clear()
        self.held.close()
        for removal in removing:
            if not removal.cancelled():
                removal.result()  # a rank that never finished the last epoch


class EpochShuffler:
    """Iterate the epochs of a training run, each a fresh full shuffle of ``src``, made in the background.

    Each epoch ``e`` is its own pile store, ``<workdir>/epoch-<e>.zarr``, shuffled
    from ``src`` with a seed drawn from ``(seed, e)``: every epoch a uniformly
    random permutation, independent of the others. Iterating yields a
    :class:`~daskshuffle.PileLoader` an epoch. The next epochs are shuffled on the
    active dask scheduler while the current one trains; at most
    ``max_concurrent_epochs`` stores exist at once, the one being read included.

    Parameters
    ----------
    src : path, URL, or a list of them
        What ``shuffle`` takes (Zarr arrays by default). Not modified.
    workdir : path or URL
        Where the epochs' stores go; created if need be. What the shuffler made
        there is removed by :meth:`close` (also when the iteration ends or the
        shuffler is garbage collected). Rank 0 holds the lock of ``workdir`` until
        then: a second shuffler of the same ``workdir`` is refused.
    n_epochs : int
        Epochs to shuffle and yield.
    batch_size : int
        As for :class:`~daskshuffle.PileLoader`.
    seed : int, optional
        The run's seed, from which each epoch's shuffle seed is drawn. ``None``
        draws one, as the shuffles do (see :meth:`state_dict`), unlike
        :class:`~daskshuffle.PileLoader`, whose ``None`` means the store's seed.
    max_concurrent_epochs : int, default 2
        Stores that may exist at once: the one being read and those shuffled
        ahead. 2 is double buffering.
    rank, world_size : int
        As for :class:`~daskshuffle.PileLoader`. Rank 0 shuffles; the other ranks
        wait for each store and read their share. Rank 0 removes an epoch's store
        once every rank marked it read, so all ranks must iterate the same epochs.
    shuffle : callable, default :func:`daskshuffle.shuffle_zarr`
        ``shuffle(src, dst, seed=..., **shuffle_options)``.
    shuffle_options, loader_options : dict, optional
        More arguments of ``shuffle`` (``n_piles``, ``pile_memory``, ...) and
        of :class:`~daskshuffle.PileLoader` (``prefetch``, ``variables``, ...).
        Names that ``shuffle`` does not take are a ``TypeError`` here.

    Examples
    --------
    >>> import daskshuffle
    >>> with daskshuffle.EpochShuffler("raw.zarr", "epochs", n_epochs=2, batch_size=250, seed=0,
    ...                                shuffle_options={"n_piles": 4}) as epochs:
    ...     firsts = [next(iter(loader))["id"][:3].tolist() for loader in epochs]
    >>> firsts[0] != firsts[1]
    True
    """

    def __init__(
        self,
        src: Any,
        workdir: str | os.PathLike[str],
        *,
        n_epochs: int,
        batch_size: int,
        seed: int | None = None,
        max_concurrent_epochs: int = 2,
        rank: int = 0,
        world_size: int = 1,
        shuffle: Callable[..., ShuffleResult] | None = None,
        shuffle_options: Mapping[str, Any] | None = None,
        loader_options: Mapping[str, Any] | None = None,
    ) -> None:
        from ..shuffle import shuffle_zarr

        # Paths made absolute now, on the client: the shuffles run later, on workers that may run in another
        # directory. Zarr groups, datasets and other objects as they are.
        if isinstance(src, str | os.PathLike):
            src = normalize(src)
        elif isinstance(src, list | tuple):
            src = [normalize(item) if isinstance(item, str | os.PathLike) else item for item in src]
        self.src = src
        self._shuffle = shuffle or shuffle_zarr
        self._shuffle_options = parse_forwarded_options(self._shuffle, shuffle_options)
        workdir_location = Location.of(parse_path(workdir, "workdir"), self._shuffle_options.get("storage_options"))
        self.workdir = workdir_location.url
        self.n_epochs = parse_positive_int(n_epochs, "n_epochs")
        self.batch_size = parse_positive_int(batch_size, "batch_size")
        self.seed = parse_seed(seed)
        self.max_concurrent_epochs = parse_positive_int(max_concurrent_epochs, "max_concurrent_epochs")
        self.world_size = parse_positive_int(world_size, "world_size")
        self.rank = parse_count(rank, "rank")
        if self.rank >= self.world_size:
            raise DaskShuffleValueError(
                f"Expected rank to be below world_size={self.world_size}. Got {self.rank} instead.", parameter="rank"
            )
        self._loader_options = dict(loader_options or {})
        self._epoch = 0
        self._loader_state: dict[str, Any] | None = None
        self._work = _Work(workdir_location, self.rank, self.world_size)
        if self.rank == 0:  # another shuffler's stores there are never reused, nor removed, by this one
            self._work.held.enter_context(exclusive(workdir_location))
        # Used without ``with`` or close(), and dropped: what it made goes too.
        self._finalizer = weakref.finalize(self, release_on_collection, self._work.close)

    def store(self, epoch: int) -> str:
        """The pile store of ``epoch``."""
        return self._work.store(epoch).url

    def _schedule(self, current: int) -> None:
        """Start the shuffles of the epochs from ``current`` on that fit ``max_concurrent_epochs``."""
        if self.rank != 0:
            return
        for epoch in range(current, min(current + self.max_concurrent_epochs, self.n_epochs)):
            if epoch not in self._work.made:
                # A call that holds no reference to the shuffler (its finalizer must run); the copied context carries
                # ``client.as_current()`` into the background thread.
                seed = epoch_seed(self.seed, epoch)
                shuffle = functools.partial(
                    self._shuffle, self.src, self.store(epoch), seed=seed, overwrite=False, **self._shuffle_options
                )
                self._work.made[epoch] = self._work.pool.submit(contextvars.copy_context().run, shuffle)

    def _ready(self, epoch: int) -> str | None:
        """Wait until ``epoch``'s store is complete; raise what its shuffle raised. ``None``: closed while waiting."""
        if self.rank == 0:
            self._schedule(epoch)
            self._work.made[epoch].result()
            for removal in [r for r in self._work.removing if r.done()]:
                self._work.removing.remove(removal)
                removal.result()  # a rank that never finished its epoch
            return self.store(epoch)
        deadline = time.monotonic() + WAIT_SECONDS
        while True:  # another process (rank 0) makes it: nothing to wait on but the store itself
            with contextlib.suppress(FileNotFoundError, UnfinishedShuffleError):
                from ..readers import open_pile_reader

                open_pile_reader(self._work.store(epoch)).close()
                return self.store(epoch)
            if time.monotonic() > deadline:
                raise DaskShuffleValueError(
                    f"Expected rank 0 to finish the store of epoch {epoch} within {WAIT_SECONDS:.0f} s. Got no "
                    f"complete store at {self.store(epoch)!r} instead; is rank 0 running with the same workdir?"
                )
            if self._work.closing.wait(0.5):  # rank 0 is another process, sharing only storage; a close ends the wait
                return None

    def _finish(self, epoch: int) -> None:
        """Epoch ``epoch`` is read by this rank: mark it, or (rank 0) queue its store's removal ahead of the next shuffle."""
        if self.rank != 0:
            marker = self._work.marker(epoch)
            marker.makedirs()
            marker.join(f"rank-{self.rank}").write_whole(b"")
            return
        self._work.made.pop(epoch, None)
        self._work.removing.append(self._work.pool.submit(self._work.remove_when_read, epoch))
        self._schedule(epoch + 1)

    def __len__(self) -> int:
        return self.n_epochs

    def __iter__(self) -> Iterator[PileLoader]:
        while self._epoch < self.n_epochs:
            epoch = self._epoch
            store = self._ready(epoch)
            if store is None:
                return
            loader = PileLoader(
                store,
                self.batch_size,
                rank=self.rank,
                world_size=self.world_size,
                storage_options=self._shuffle_options.get("storage_options"),
                **self._loader_options,
            )
            if self._loader_state is not None:
                loader.load_state_dict(self._loader_state)
                self._loader_state = None
            self._work.loader = loader
            yield loader
            loader.close()
            self._work.loader = None
            self._epoch = epoch + 1
            self._finish(epoch)
        self.close()  # used without ``with``, as a plain for loop: nothing is left behind

    def state_dict(self) -> dict[str, Any]:
        """The epoch in progress and its loader's position, and the run's seed: JSON-serialisable.

        Past its epoch's last batch, the state is the start of the next epoch.
        """
        loader = self._work.loader.state_dict() if self._work.loader is not None else None
        epoch, loader = _next_batch(self._epoch, loader)
        return {"epoch": epoch, "seed": self.seed, "loader": loader}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue where the shuffler that saved ``state`` was: the same epoch, the same next batch.

        The epoch's store is shuffled again if it is gone (the same seed gives the same store).
        """
        if int(state["seed"]) != self.seed:
            raise DaskShuffleValueError(
                f"Expected the state of a shuffler with seed={self.seed}. Got seed={state['seed']} instead; "
                "create the shuffler with the seed the state records.",
                parameter="state",
            )
        loader = dict(state["loader"]) if state.get("loader") is not None else None
        self._epoch, self._loader_state = _next_batch(parse_count(state["epoch"], "epoch"), loader)

    def close(self) -> None:
        """Remove every store the shuffler made, once the other ranks have read them; join its thread."""
        self._work.broken_off = self._epoch < self.n_epochs
        self._finalizer()

    def __enter__(self) -> EpochShuffler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
