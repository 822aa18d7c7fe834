"""A loader's position in its epochs, and everything that reads or moves it: the part of ``PileLoader`` that iterates."""

from __future__ import annotations

import contextlib
import inspect
import threading
import weakref
from collections.abc import Generator, Iterator, Mapping
from typing import Any

from .._errors import DaskShuffleValueError
from .._parse import parse_count
from ._batches import Allocate
from ._loader_state import STATE_VERSION, LoaderSettings, check_state
from ._mix import check_streams
from ._prefetch import ReadAhead
from ._rank_share import RankShare

__all__ = ["LoaderPosition"]

_END = object()


class LoaderPosition:
    """The epoch and batch a loader yields next, the iterations that move them, and their saved state.

    :class:`~daskshuffle.PileLoader` sets the attributes below, then calls
    ``LoaderPosition.__init__`` (the first batch of epoch 0). The iteration
    that moves the position belongs to the thread that started it; ranges of
    batches move nothing and run in any thread.
    """

    settings: LoaderSettings
    store: str
    _share: RankShare
    _read_ahead: ReadAhead
    _store_fingerprint: str
    _streams: list[dict[str, Any]] | None

    def __init__(self) -> None:
        self._epoch = 0
        self._batches = 0
        self._live: weakref.ref[Generator[Any, None, None]] | None = None
        self._live_thread: threading.Thread | None = None
        self._moving = threading.Lock()

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._position()[0]

    def _position(self) -> tuple[int, int]:
        if self._batches >= self._share.n_batches:
            return self._epoch + 1, 0
        return self._epoch, self._batches

    def _close_live(self) -> None:
        generator = self._live() if self._live is not None else None
        self._live = None
        if generator is not None:
            with contextlib.suppress(ValueError):  # "generator already executing": called from inside it
                generator.close()

    def _check_one_consumer(self, doing: str) -> None:  # with _moving held
        generator = self._live() if self._live is not None else None
        owner, here = self._live_thread, threading.current_thread()
        state = inspect.GEN_CLOSED if generator is None else inspect.getgeneratorstate(generator)
        if state == inspect.GEN_CLOSED or (owner is here and state != inspect.GEN_RUNNING):
            return  # none open (finished, closed or collected), or this thread's own, between two batches
        by = f"thread {owner.name!r}" if owner is not None else "another thread"
        raise DaskShuffleValueError(
            f"Expected one consumer per PileLoader. Got {doing} in thread {here.name!r} while the iteration started "
            f"by {by} is open instead: two consumers of one position would each be handed the same rows, or "
            "stop each other. Give each thread its own PileLoader (with rank= and world_size= to split the rows), "
            "read ranges with iter_batches(epoch, start, stop), or finish or close the first iteration first."
        )

    def __iter__(self) -> Iterator[Any]:
        with self._moving:
            self._check_one_consumer("a second iteration")
            self._close_live()
            epoch, first = self._position()
            self._epoch, self._batches = epoch, first
            closes = self._share.piles.closes
            if self._read_ahead.stale:  # closed since: its reads start nothing any more
                self._read_ahead = ReadAhead(self._share.piles, closes)
            batches = self._share.batches(epoch, first, None, closes, self._read_ahead)
            generator = self._generate(batches, epoch, first, track=True, closes=closes)
            self._live, self._live_thread = weakref.ref(generator), threading.current_thread()
        return generator

    def iter_batches(
        self, epoch: int, start: int = 0, stop: int | None = None, *, allocate: Allocate | None = None
    ) -> Generator[Any, None, None]:
        """Batches ``start:stop`` of ``epoch`` for this rank, without moving the loader's position.

        The same batches as iterating the loader over that epoch, read by
        reads of the range's own; after :meth:`close` the range raises a
        :class:`~daskshuffle.DaskShuffleValueError` at its next batch.
        ``allocate(n_rows, layout)``, if given, makes the arrays each numpy
        batch is gathered into (``layout``: each variable's dtype and row
        shape), for example in shared memory.

        Examples
        --------
        >>> from daskshuffle import PileLoader
        >>> loader = PileLoader("piles.zarr", batch_size=100)
        >>> [len(batch["id"]) for batch in loader.iter_batches(epoch=3, start=8)]
        [100, 100]
        >>> loader.epoch
        0
        """
        closes = self._share.piles.closes
        batches = self._share.batches(epoch, start, stop, closes, allocate=allocate)
        return self._generate(batches, epoch, start, track=False, closes=closes)

    def _generate(
        self, batches: Generator[Any, None, None], epoch: int, first: int, *, track: bool, closes: int
    ) -> Generator[Any, None, None]:
        """``batches``, the ``first``-th onwards of ``epoch``; with ``track`` the loader's position follows them.

        Begun when :meth:`close` had run ``closes`` times: closed since, it
        raises at its next batch rather than end the epoch early as if whole.
        """
        piles, made = self._share.piles, first
        try:
            while piles.closes == closes:
                batch = next(batches, _END)
                if batch is _END:
                    if track:
                        self._epoch, self._batches = epoch + 1, 0
                    return
                made += 1
                if track:
                    self._batches = made
                yield batch
        except Exception as error:
            if piles.closes != closes:  # the reads stopped by the close
                raise self._closed(epoch, made, track) from error
            raise
        finally:
            batches.close()  # stops its reads, unless they read ahead for the next epoch
        raise self._closed(epoch, made, track)

    @staticmethod
    def _closed(epoch: int, batch: int, track: bool) -> DaskShuffleValueError:
        by, again = (" by another thread", "iterate it again") if track else ("", "ask for the range again")
        return DaskShuffleValueError(
            f"Expected an open iteration of a PileLoader to go on. Got the loader closed{by} instead, before batch "
            f"{batch} of epoch {epoch}; {again} to go on from that batch."
        )

    def peek(self) -> Any:
        """The batch that comes next, without moving the loader's position (``next(iter(loader))`` moves it).

        Examples
        --------
        >>> from daskshuffle import PileLoader
        >>> loader = PileLoader("piles.zarr", batch_size=100, seed=0)
        >>> first = loader.peek()
        >>> batches = list(loader)
        >>> len(batches), bool((first["id"] == batches[0]["id"]).all())
        (10, True)
        """
        epoch, batch = self._position()
        batches = self.iter_batches(epoch, batch, batch + 1)
        try:
            return next(batches)
        finally:
            batches.close()

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch``; an iteration in progress stops.

        Examples
        --------
        >>> from daskshuffle import PileLoader
        >>> loader = PileLoader("piles.zarr", batch_size=100)
        >>> loader.set_epoch(3)
        >>> loader.epoch
        3
        """
        self._move("set_epoch", parse_count(epoch, "epoch"), 0)

    def _move(self, doing: str, epoch: int, batches: int) -> None:
        """Stop the iteration in progress (``doing`` is refused in another thread's) and go to ``epoch``, ``batches``."""
        with self._moving:
            self._check_one_consumer(doing)
            self._close_live()
            self._epoch, self._batches = epoch, batches

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is (epoch, batches, fingerprints of store and settings), for :meth:`load_state_dict`.

        Examples
        --------
        >>> from daskshuffle import PileLoader
        >>> loader = PileLoader("piles.zarr", batch_size=100)
        >>> batches = iter(loader)
        >>> first, second = next(batches), next(batches)
        >>> state = loader.state_dict()
        >>> state["epoch"], state["batches"]
        (0, 2)
        """
        epoch, batches = self._position()
        return {
            "version": STATE_VERSION,
            "epoch": epoch,
            "batches": batches,
            "store": self._store_fingerprint,
            "settings": self.settings.to_dict(),
            "settings_fingerprint": self.settings.fingerprint,
            **({} if self._streams is None else {"streams": self._streams}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly where the loader that saved ``state`` stopped.

        The next iteration yields what an uninterrupted run would have yielded
        next. A state of another store or other settings is refused. An
        iteration in progress stops.

        Examples
        --------
        >>> from daskshuffle import PileLoader
        >>> first = PileLoader("piles.zarr", batch_size=100)
        >>> batches = iter(first)
        >>> skipped = [next(batches) for _ in range(3)]
        >>> resumed = PileLoader("piles.zarr", batch_size=100)
        >>> resumed.load_state_dict(first.state_dict())
        >>> bool((next(iter(resumed))["id"] == next(batches)["id"]).all())
        True
        """
        check_streams(state, self._streams)
        epoch, batches = check_state(state, self.store, self._store_fingerprint, self.settings, self._share.n_batches)
        self._move("load_state_dict", epoch, batches)
