"""``PileLoader``: shuffled minibatches from a pile store, during training.

This is the second pass of the 2-pass shuffle, done lazily: each epoch visits
the piles in a fresh random order, shuffles each pile in memory with a fresh
permutation (both keyed by ``(seed, epoch, pile)`` only), and gathers batches
in that order, running across pile boundaries. While the consumer trains on one
pile, background threads read the next ones.

The loader reads through the formats (:func:`daskshuffle.formats.open_pile_reader`)
and never imports dask: it runs on a training machine with no scheduler at all.
Which rows each rank and each batch gets is planned by pure functions of
:mod:`daskshuffle._plan`; this module only schedules reads and hands out rows.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import count
from types import TracebackType
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ._errors import DaskShuffleTypeError, DaskShuffleValueError
from ._parse import parse_bool, parse_path, parse_positive_int, parse_seed, parse_variables
from ._plan import epoch_pile_order, fingerprint, n_batches, pile_permutation, rank_range, stream_segments
from .formats import PileReader, open_pile_reader

__all__ = ["LoaderSettings", "PileLoader"]

#: Version of the dict that :meth:`PileLoader.state_dict` returns.
STATE_VERSION = 1
_STATE_KEYS = ("version", "epoch", "batches", "store", "settings", "settings_fingerprint")
#: Redraw the progress bar at most this often, so that it costs nothing per batch.
_PROGRESS_SECONDS = 0.2
_loader_ids = count()


@dataclass(frozen=True)
class LoaderSettings:
    """What decides which rows a loader yields and how they are cut into batches.

    Two loaders of one store with equal settings yield the same batches in
    every epoch; their fingerprint goes into :meth:`PileLoader.state_dict`, so
    that a state is never loaded into a loader that would continue differently.
    ``prefetch``, ``variables`` and ``progress`` change how rows are read, not
    which, and are left out.

    Examples
    --------
    >>> settings = LoaderSettings(batch_size=32, seed=0, rank=0, world_size=1, drop_last=False)
    >>> LoaderSettings.from_dict(settings.to_dict()) == settings
    True
    """

    batch_size: int
    seed: int
    rank: int
    world_size: int
    drop_last: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoaderSettings:
        names = [field.name for field in dataclasses.fields(cls)]
        if not isinstance(data, Mapping) or sorted(data) != sorted(names):
            raise DaskShuffleValueError(f"Expected loader settings with the keys {names}. Got {data!r} instead.")
        return cls(**{name: data[name] for name in names})

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.to_dict())


class _Read(NamedTuple):
    """Positions ``start:stop`` of ``pile`` once shuffled for ``epoch``: one background read."""

    epoch: int
    pile: int
    start: int
    stop: int


class _ShuffledPiles:
    """Reads a pile and shuffles it for an epoch. Holds no reference to the loader."""

    def __init__(self, reader: PileReader[Any], store: str, seed: int) -> None:
        self.reader = reader
        self.store = store
        self.seed = seed
        self.offsets = reader.pile_offsets

    def read(self, job: _Read) -> tuple[Any, NDArray[np.intp]]:
        """The pile's rows as stored, and the order to hand out positions ``start:stop`` in."""
        first, last = int(self.offsets[job.pile]), int(self.offsets[job.pile + 1])
        try:
            rows = self.reader.read_pile(job.pile)
        except Exception as error:
            error.add_note(
                f"daskshuffle was reading pile {job.pile} (rows {first}:{last}) of {self.store!r} for epoch {job.epoch}."
            )
            raise
        return rows, pile_permutation(self.seed, job.epoch, job.pile, last - first)[job.start : job.stop]


class _Prefetcher:
    """Runs reads in background threads, ``depth`` of them ahead of the consumer.

    Futures, not queues: the consumer blocks only in ``Future.result()``, which
    also raises whatever went wrong in the background. ``close`` cancels what
    has not started and joins the threads. It never refers to the loader, so
    that garbage collection of the loader can close it.
    """

    def __init__(self, read: Callable[[_Read], Any], depth: int) -> None:
        self._read = read
        self._depth = depth
        self._prefix = f"daskshuffle-loader-{next(_loader_ids)}"
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[_Read, Future[Any]] = {}
        self._lock = threading.Lock()

    def get(self, jobs: Sequence[_Read], index: int) -> Any:
        """The rows of ``jobs[index]``, once the ``depth`` jobs after it are under way."""
        if self._depth == 0:
            return self._read(jobs[index])
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._depth, thread_name_prefix=self._prefix)
            for job in jobs[index : index + self._depth + 1]:
                if job not in self._pending:
                    self._pending[job] = self._executor.submit(self._read, job)
            future = self._pending.pop(jobs[index])
        return future.result()

    def keep_only(self, jobs: Sequence[_Read]) -> None:
        """Cancel the reads under way that are not among ``jobs``."""
        with self._lock:
            for job in [job for job in self._pending if job not in jobs]:
                self._pending.pop(job).cancel()

    def close(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            executor, self._executor = self._executor, None
        for future in pending.values():
            future.cancel()
        if executor is not None:
            # A thread cannot join itself: if garbage collection closes us from
            # one of our own threads, let the threads finish on their own.
            wait = not threading.current_thread().name.startswith(self._prefix)
            executor.shutdown(wait=wait, cancel_futures=True)


class _Progress:
    """An optional progress bar over an epoch, redrawn a few times a second."""

    def __init__(self, enabled: bool, epoch: int, total: int, completed: int) -> None:
        self._bar: Any = None
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        # auto_refresh=False: rich would otherwise start a thread of its own.
        self._bar = Progress(
            TextColumn(f"epoch {epoch}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), auto_refresh=False
        )
        self._task = self._bar.add_task("batches", total=total, completed=completed)
        self._drawn = 0.0
        self._bar.start()

    def advance(self) -> None:
        if self._bar is None:
            return
        self._bar.advance(self._task)
        now = time.monotonic()
        if now - self._drawn > _PROGRESS_SECONDS:
            self._drawn = now
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.refresh()
            self._bar.stop()


def _parse_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DaskShuffleTypeError(f"Expected {name} to be an integer >= 0. Got {value!r} instead.")
    if value < 0:
        raise DaskShuffleValueError(f"Expected {name} to be an integer >= 0. Got {value!r} instead.")
    return int(value)


def _parse_rank(rank: object, world_size: int) -> int:
    rank = _parse_count(rank, "rank")
    if rank >= world_size:
        raise DaskShuffleValueError(
            f"Expected rank to lie in [0, world_size) = [0, {world_size}). Got {rank} instead; "
            "ranks are numbered from 0, as in torch.distributed."
        )
    return rank


class PileLoader:
    """Shuffled minibatches from a pile store: the lazy second pass of the 2-pass shuffle.

    Iterating yields one epoch of batches, each a dict of numpy arrays keyed
    by variable name (for a Zarr store) with ``batch_size`` rows, except
    possibly the last. Every epoch visits the piles in a fresh random order
    and shuffles each pile in memory with a fresh permutation, both derived
    from ``(seed, epoch, pile)`` only; batches run across pile boundaries.
    Iterating again continues where the last iteration stopped: after a
    whole epoch, that is the next epoch.

    While one pile is being consumed the next ``prefetch`` piles are read in
    background threads, so that a consumer slower than the reader never waits
    after the first pile. Memory stays within about ``prefetch + 1`` piles and
    a batch (and half a pile more while a pile is being read). Batches are new
    arrays, gathered from the pile. Once an epoch ends, the first piles of the
    next one are already being read; :meth:`close` (or ``with``) releases them
    and the threads.

    Parameters
    ----------
    store : path or URL
        A complete pile store, written by a daskshuffle shuffle.
    batch_size : int
        Rows per batch.
    seed : int, optional
        Seeds the order of the piles and the shuffle inside each pile. By
        default the seed recorded in the store, so that two runs on one store
        agree unless told otherwise.
    rank, world_size : int, default 0 and 1
        For data-parallel training: this process's rank and the number of
        ranks. Within an epoch ranks get disjoint rows and the same number of
        batches; fewer than ``world_size`` rows are left out of each epoch
        (fewer than ``world_size * batch_size`` with ``drop_last``), and which
        rows changes from epoch to epoch. A rank reads only its own share of
        the piles, plus at most one pile it shares with each neighbour.
    drop_last : bool, default False
        Leave out each rank's last, partial batch.
    prefetch : int, default 1
        Piles read ahead in the background: 1 is double buffering, 0 reads in
        the consumer's thread.
    variables : list of str, optional
        The variables (or columns) to read; by default all.
    batch_format : {"numpy", "arrow", "pandas"}, default "numpy"
        What a batch is: a dict of numpy arrays, or, for a Parquet pile store,
        a ``pyarrow.RecordBatch`` or a pandas DataFrame.
    progress : bool, default False
        Show a progress bar over each epoch.
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> loader = ds.PileLoader("piles.zarr", batch_size=1024)  # doctest: +SKIP
    >>> for epoch in range(3):  # doctest: +SKIP
    ...     for batch in loader:
    ...         train_step(batch["x"], batch["y"])
    ...     save(model, loader.state_dict())
    """

    def __init__(
        self,
        store: str | os.PathLike[str],
        batch_size: int,
        *,
        seed: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        prefetch: int = 1,
        variables: Sequence[str] | None = None,
        batch_format: Literal["numpy", "arrow", "pandas"] = "numpy",
        progress: bool = False,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        path = parse_path(store, "store")
        batch_size = parse_positive_int(batch_size, "batch_size")
        world_size = parse_positive_int(world_size, "world_size")
        rank = _parse_rank(rank, world_size)
        drop_last = parse_bool(drop_last, "drop_last")
        self._prefetch = _parse_count(prefetch, "prefetch")
        self._progress = parse_bool(progress, "progress")
        chosen = parse_variables(variables)
        reader = open_pile_reader(path, chosen, storage_options, batch_format=batch_format)
        metadata = reader.metadata
        self.settings = LoaderSettings(
            batch_size=batch_size,
            seed=int(metadata["seed"]) if seed is None else parse_seed(seed),
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
        )
        self.store = path
        self.variables = chosen or list(metadata["variables"])
        self.n_piles = int(metadata["n_piles"])
        self._store_fingerprint = str(metadata["fingerprint"])
        self._piles = _ShuffledPiles(reader, path, self.settings.seed)
        n_rows = int(metadata["n_rows"])
        self._range = rank_range(n_rows, world_size, rank, batch_size, drop_last)
        self._n_batches = n_batches(self._range[1] - self._range[0], batch_size, drop_last)
        if self._n_batches == 0:
            raise DaskShuffleValueError(
                f"Expected every rank to get at least one batch per epoch. Got none: {n_rows:,} rows over "
                f"world_size={world_size} with batch_size={batch_size} and drop_last={drop_last} instead; "
                "use a smaller batch_size, drop_last=False or fewer ranks."
            )
        self._epoch = 0
        self._batches = 0
        self._live: weakref.ref[Generator[Any, None, None]] | None = None
        self._prefetcher = _Prefetcher(self._piles.read, self._prefetch)
        # Also stop the background threads if the loader is dropped without close().
        self._finalizer = weakref.finalize(self, self._prefetcher.close)

    # -- what it yields ------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.settings.batch_size

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def rank(self) -> int:
        return self.settings.rank

    @property
    def world_size(self) -> int:
        return self.settings.world_size

    @property
    def n_rows(self) -> int:
        """Rows this rank yields per epoch."""
        return self._range[1] - self._range[0]

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._position()[0]

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        return self._n_batches

    def __repr__(self) -> str:
        return (
            f"<PileLoader {self.store!r}: batch_size={self.batch_size}, rank {self.rank} of {self.world_size}, "
            f"{len(self)} batches ({self.n_rows:,} rows) per epoch from {self.n_piles} piles, seed={self.seed}, "
            f"next epoch {self.epoch}>"
        )

    def piles(self, epoch: int | None = None) -> list[int]:
        """The piles this rank reads in ``epoch`` (by default the current one), in reading order.

        Examples
        --------
        >>> PileLoader("piles.zarr", batch_size=64, rank=1, world_size=4).piles(0)  # doctest: +SKIP
        [17, 3, 250, ...]
        """
        epoch = self.epoch if epoch is None else _parse_count(epoch, "epoch")
        return [job.pile for job in self._reads(epoch, *self._range)]

    # -- iteration -----------------------------------------------------------
    def _position(self) -> tuple[int, int]:
        """The epoch and the batch within it that come next."""
        if self._batches >= self._n_batches:
            return self._epoch + 1, 0
        return self._epoch, self._batches

    def _reads(self, epoch: int, begin: int, end: int) -> list[_Read]:
        order = epoch_pile_order(self.seed, epoch, self.n_piles)
        return [_Read(epoch, *segment) for segment in stream_segments(self._piles.offsets, order, begin, end)]

    def _close_live(self) -> None:
        generator = self._live() if self._live is not None else None
        self._live = None
        if generator is not None:
            generator.close()

    def __iter__(self) -> Iterator[Any]:
        self._close_live()
        epoch, first = self._position()
        self._epoch, self._batches = epoch, first
        generator = self._generate(epoch, first, self._n_batches, track=True)
        self._live = weakref.ref(generator)
        return generator

    def _generate(self, epoch: int, first: int, stop: int, *, track: bool) -> Generator[Any, None, None]:
        """Batches ``first:stop`` of ``epoch`` for this rank.

        With ``track`` the loader's position follows the batches handed out
        (for :meth:`state_dict`) and, at the end of the epoch, the reads of the
        next epoch's first piles start.
        """
        batch_size = self.batch_size
        reader = self._piles.reader
        start, end = self._range
        jobs = self._reads(epoch, start + first * batch_size, min(start + stop * batch_size, end))
        # The next epoch's first reads follow this epoch's last ones, so that
        # starting the next epoch does not wait for a pile either.
        ahead = self._reads(epoch + 1, start, end)[: self._prefetch] if track and stop == self._n_batches else []
        sequence = jobs + ahead
        self._prefetcher.keep_only(sequence[: self._prefetch + 1])
        progress = _Progress(self._progress and track, epoch, self._n_batches, first)
        produced = first
        finished = False
        try:
            parts: list[Any] = []
            filled = 0
            for index in range(len(jobs)):
                # Batches are gathered from the pile as stored rather than from a
                # shuffled copy of it: that copy would double the pile's memory, and
                # batches that are copies do not keep a pile alive after it is used.
                rows, order = self._prefetcher.get(sequence, index)
                position = 0
                while position < len(order):
                    take = min(batch_size - filled, len(order) - position)
                    parts.append(reader.take(rows, order[position : position + take]))
                    position += take
                    filled += take
                    if filled == batch_size:
                        batch = parts[0] if len(parts) == 1 else reader.concat(parts)
                        parts, filled = [], 0
                        produced += 1
                        if track:
                            self._batches = produced
                        progress.advance()
                        yield reader.to_batch(batch)
                del rows, order
            if parts:
                produced += 1
                if track:
                    self._batches = produced
                progress.advance()
                yield reader.to_batch(parts[0] if len(parts) == 1 else reader.concat(parts))
            finished = True
            if track:
                self._epoch, self._batches = epoch + 1, 0
        finally:
            progress.close()
            if not finished:
                # Broken out of, closed, interrupted or failed: stop the background reads.
                self._prefetcher.close()

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch``.

        An iteration in progress stops.

        Examples
        --------
        >>> loader.set_epoch(3)  # doctest: +SKIP
        >>> batches = list(loader)  # epoch 3  # doctest: +SKIP
        """
        epoch = _parse_count(epoch, "epoch")
        self._close_live()
        self._epoch, self._batches = epoch, 0

    # -- resumption ----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: a small JSON-serialisable dict for :meth:`load_state_dict`.

        It records the epoch and the batches of it already handed out, and
        fingerprints of the store and of the :class:`LoaderSettings`.

        Examples
        --------
        >>> state = loader.state_dict()  # doctest: +SKIP
        >>> state["epoch"], state["batches"]  # doctest: +SKIP
        (2, 113)
        """
        epoch, batches = self._position()
        return {
            "version": STATE_VERSION,
            "epoch": epoch,
            "batches": batches,
            "store": self._store_fingerprint,
            "settings": self.settings.to_dict(),
            "settings_fingerprint": self.settings.fingerprint,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly where the loader that saved ``state`` stopped.

        The next iteration yields the batches an uninterrupted run would have
        yielded next, and reads no pile before the one it continues in. A state
        of another store or of other settings is refused. An iteration in
        progress stops.

        Examples
        --------
        >>> loader = PileLoader("piles.zarr", batch_size=1024)  # doctest: +SKIP
        >>> loader.load_state_dict(json.loads(saved))  # doctest: +SKIP
        """
        if not isinstance(state, Mapping) or sorted(state) != sorted(_STATE_KEYS):
            raise DaskShuffleValueError(
                f"Expected a dict returned by PileLoader.state_dict(), with the keys {list(_STATE_KEYS)}. "
                f"Got {state!r} instead."
            )
        if state["version"] != STATE_VERSION:
            raise DaskShuffleValueError(
                f"Expected a loader state of version {STATE_VERSION}. Got version {state['version']!r} instead."
            )
        if state["store"] != self._store_fingerprint:
            raise DaskShuffleValueError(
                f"Expected a state saved by a loader of {self.store!r} (store fingerprint {self._store_fingerprint}). "
                f"Got a state of another store (fingerprint {state['store']!r}) instead; load it into a loader of "
                "the store it was saved with."
            )
        saved = LoaderSettings.from_dict(state["settings"])
        if saved != self.settings or state["settings_fingerprint"] != self.settings.fingerprint:
            differ = {
                name: (value, getattr(self.settings, name))
                for name, value in state["settings"].items()
                if value != getattr(self.settings, name)
            }
            raise DaskShuffleValueError(
                "Expected a state saved with this loader's settings. Got a state whose settings differ "
                f"({', '.join(f'{name}: saved {a!r}, here {b!r}' for name, (a, b) in differ.items()) or 'fingerprint'}) "
                "instead; create the loader with the saved settings, or start a new run at an epoch boundary "
                f"with set_epoch({state['epoch'] + (state['batches'] > 0)})."
            )
        epoch = _parse_count(state["epoch"], "the state's epoch")
        batches = _parse_count(state["batches"], "the state's batches")
        if batches > self._n_batches:
            raise DaskShuffleValueError(
                f"Expected the state's batches to be at most {self._n_batches}, the batches per epoch. "
                f"Got {batches} instead."
            )
        self._close_live()
        self._epoch, self._batches = epoch, batches

    # -- resources -----------------------------------------------------------
    def close(self) -> None:
        """Stop the iteration in progress and the background reads, and join their threads."""
        self._close_live()
        self._prefetcher.close()

    def __enter__(self) -> PileLoader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
