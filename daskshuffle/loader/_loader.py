"""``PileLoader``: opens the store and the settings; the iterating part is :mod:`._loader_position`.

The loader never imports dask: it runs on a training machine with no scheduler.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Literal

import numpy as np

from .._errors import DaskShuffleValueError, IneffectiveSettingWarning
from .._parse import parse_bool, parse_count, parse_positive_int, parse_seed, parse_variables
from .._threads import release_on_collection
from ..epochs import BatchPlan, Order, OrderName, Piles, Stream, check_combination, parse_order, parse_streams
from ..storage import Cache, parse_cache
from ._loader_position import LoaderPosition
from ._loader_state import LoaderSettings, parse_rank, row_nbytes
from ._mix import open_loader_store
from ._order_reads import make_reads
from ._prefetch import ReadAhead, parse_prefetch
from ._rank_share import RankShare
from ._reads import LoaderReads
from ._unit_groups import choose_units

__all__ = ["LoaderSettings", "PileLoader"]


class PileLoader(LoaderPosition):
    """Shuffled minibatches from a pile store: the lazy second pass of the 2-pass shuffle.

    Iterating yields one epoch of batches of ``batch_size`` rows (the last
    may be shorter), each a dict of numpy arrays keyed by variable name;
    iterating again goes on where the last iteration stopped. A loader has
    one consumer: another thread that iterates it (or moves its position)
    while one thread's iteration is open gets an error.

    What is read: with ``order="piles"`` (:class:`~daskshuffle.orders.Piles`),
    the store in units of whole chunks (a Parquet store's row groups), dealt
    afresh each epoch into groups of up to half the order's budget; each group
    is read at once and handed out in a fresh permutation, both drawn from
    ``(seed, epoch)``. The store holds its rows in a uniform random order, so
    each epoch is a uniform permutation. How close to independent: two rows
    that shared a batch meet in one again about ``data * unit / group**2 + 1``
    times as often as under independent shuffles, near 2 with the automatic
    budget.

    Memory: the order's budget (the group in use and the one read ahead by one
    pool of reader threads), a batch, and on a remote store the requests in
    flight (``prefetch``). Batches are new arrays. The first group of the next
    epoch is read while this one ends; :meth:`close` (or ``with``) releases it
    and the threads.

    Parameters
    ----------
    store : path or URL, Stream, or list of them
        A complete pile store written by a daskshuffle shuffle; or several,
        trained on as one: a list of paths (each row once per epoch) or of
        :class:`~daskshuffle.Stream`, which up- or downsample their store
        (``repeat``, ``choose``, ``proportion``), their units dealt together
        into the epoch's groups. They must be of one kind with the same
        variables and dtypes (checked before any row is read), with
        ``order="piles"``.
    batch_size : int
        Rows per batch.
    seed : int, optional
        Seeds every epoch's order (the deal of units into groups, each group's
        permutation, an order's own draws). By default the seed recorded in
        the store, so that two runs on one store agree.
    rank, world_size : int, default 0 and 1
        For data-parallel training: this process's rank and the number of
        ranks. Within an epoch ranks get disjoint rows and the same number of
        batches; fewer than ``world_size`` rows (``world_size * batch_size``
        with ``drop_last``) are left out of each epoch, other ones each epoch.
        A rank reads its own share of the reads, plus at most one it shares
        with each neighbour.
    drop_last : bool, default False
        Leave out each rank's last, partial batch.
    order : str or daskshuffle.orders.Order, default "piles"
        The order of each epoch, with its options: an order of
        :mod:`daskshuffle.orders` (``ds.orders.Piles(budget="1GiB")``,
        ``ds.orders.Py1b(shuffle_block_size=4096)``, ...), or the name of one
        that needs no options: ``"piles"`` (the above, with its automatic
        budget), ``"naive"``, ``"py1s"`` or ``"py2s"``. The unit and group
        rows a budget gives are in ``settings``. Every order takes ``n_lanes``
        for elastic determinism (``ds.orders.Piles(n_lanes=8)``): each epoch is
        cut into that many lanes, so that the rows of each global step (with
        ``world_size * batch_size`` fixed) are the same for any ``world_size``
        that divides ``n_lanes``, and a state saved with one world size loads
        with another; numpy batches only.
    prefetch : str, default "auto"
        Bytes of rows read ahead of the consumer: ``"auto"`` reads the next
        group (or an order's next stretch) whatever it holds; a size such as
        ``"1GiB"`` reads ahead the reads that fit it (``"0B"``: nothing ahead).
        On object storage the requests of the reads ahead go out at once,
        within ``loader.read-ahead-nbytes`` (256 MiB) with ``"auto"``, within
        the size otherwise. A chunk file holding rows of two reads is kept (up
        to 64 MiB of them) for the second, so that an epoch fetches each once.
    variables : list of str, optional
        The variables (or columns) to read; by default all.
    batch_format : {"numpy", "xarray", "arrow", "pandas"}, default "numpy"
        What a batch is: a dict of numpy arrays; for a Zarr pile store, an
        ``xarray.Dataset`` (dimensions, attributes, CF decoding and the
        coordinates of the sampled rows, as ``xr.open_zarr`` gives them); for
        a Parquet pile store, a ``pyarrow.RecordBatch`` or a pandas DataFrame.
        In numpy batches a time-zone-aware timestamp is a ``datetime64`` of
        the UTC instant, a categorical its values, and a column with nulls a
        float (NaN) or object array; ``"pandas"`` and ``"arrow"`` keep them.
    cache : path or Cache, optional
        A directory on a local disk (or a :class:`~daskshuffle.Cache`, which
        also sets its size limit, 10 GiB by default) where what is read from a
        remote pile store is kept for later epochs. Each file is checked as it
        is read (a damaged one is read from the store again); loaders on one
        machine may share the directory. For a local store a cache does
        nothing, and warns (:class:`~daskshuffle.IneffectiveSettingWarning`).
    storage_options : dict, optional
        Passed to fsspec for URLs.

    Raises
    ------
    DaskShuffleTypeError
        For ``prefetch`` given as a number rather than a size.
    DaskShuffleValueError
        For settings that do not go together (lanes that do not fit the ranks
        or the batch, several streams with an order other than ``"piles"``),
        before any store is opened. When iterated (or its position moved) in
        one thread while another thread's iteration of it is open.
    CorruptPileStoreError
        While iterating, at the first batch that needs a group whose files are
        missing, truncated or corrupted; the loader then stops its reads.
    StoreChangedError
        While iterating, at the first batch that needs files that ``evict`` or
        ``compact`` removed since the loader was opened; open a new loader.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> with ds.PileLoader("piles.zarr", batch_size=100, seed=0) as loader:
    ...     for epoch in range(2):
    ...         n_rows = sum(len(batch["x"]) for batch in loader)
    ...     state = loader.state_dict()
    >>> n_rows, len(loader), state["epoch"]
    (1000, 10, 2)

    Two stores, the second upsampled: every row of it twice and a fresh half
    of them a third time, each epoch:

    >>> _ = ds.shuffle_zarr("raw.zarr", "rare.zarr", n_piles=4, seed=1)
    >>> streams = ["piles.zarr", ds.Stream("rare.zarr", repeat=2.5)]
    >>> with ds.PileLoader(streams, batch_size=100, seed=0) as loader:
    ...     n_rows = sum(len(batch["id"]) for batch in loader)
    >>> n_rows, [stream["rows_per_epoch"] for stream in loader.state_dict()["streams"]]
    (3500, [1000, 2500])
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Stream | Sequence[str | os.PathLike[str] | Stream],
        batch_size: int,
        *,
        seed: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        order: Order | OrderName = "piles",
        prefetch: str = "auto",
        variables: Sequence[str] | None = None,
        batch_format: Literal["numpy", "xarray", "arrow", "pandas"] = "numpy",
        cache: str | os.PathLike[str] | Cache | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        batch_size = parse_positive_int(batch_size, "batch_size")
        world_size = parse_positive_int(world_size, "world_size")
        rank = parse_rank(rank, world_size)
        drop_last = parse_bool(drop_last, "drop_last")
        chosen_order = parse_order(order)
        streams = parse_streams(store)
        check_combination(
            chosen_order,
            n_streams=None if streams is None else len(streams),
            world_size=world_size,
            batch_size=batch_size,
            batch_format=batch_format,
        )
        prefetching = parse_prefetch(prefetch)
        chosen = parse_variables(variables)
        path, reader, mixture = open_loader_store(store, streams, chosen, storage_options, batch_format)
        chosen_cache = parse_cache(cache)
        if chosen_cache is not None and not reader.caches:
            warnings.warn(
                f"Expected cache= only for a remote pile store. Got cache={os.fspath(chosen_cache.directory)!r} for "
                f"{path!r}, which is read where it lies, so the cache does nothing; leave cache= out.",
                IneffectiveSettingWarning,
                stacklevel=2,
            )
        elif chosen_cache is not None:
            reader.use_cache(chosen_cache)
        metadata = reader.metadata
        n_rows = reader.n_rows if mixture is None else sum(mixture.counts)
        row = row_nbytes(reader)
        units = choose_units(chosen_order.budget, reader, row, n_rows) if isinstance(chosen_order, Piles) else None
        self.settings = LoaderSettings(
            batch_size=batch_size,
            seed=int(metadata["seed"]) if seed is None else parse_seed(seed),
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
            order=chosen_order.name,
            # The order's options and lanes; Piles' budget is in force as its unit_rows and group_rows.
            **{name: value for name, value in asdict(chosen_order).items() if name != "budget"},
            unit_rows=None if units is None else units.unit_rows,
            group_rows=None if units is None else units.group_rows,
        )
        self.store = path
        self.variables = chosen or list(metadata["variables"])
        self.n_piles = int(metadata["n_piles"])
        self._store_fingerprint = str(metadata["fingerprint"])
        reads = make_reads(self.settings, chosen_order, reader, units, mixture)
        self._streams = None if mixture is None else mixture.records
        self._piles = LoaderReads(reader, path, reads, prefetching.in_flight, prefetching.held, row)
        self._share = RankShare(self._piles, self.settings, n_rows)
        super().__init__()  # the position: epoch 0, its first batch
        self._read_ahead = ReadAhead(self._piles, self._piles.closes)
        # Also stop the reader threads if the loader is dropped without close().
        self._finalizer = weakref.finalize(self, release_on_collection, self._piles.close)

    @property
    def n_rows(self) -> int:
        """Rows this rank yields per epoch."""
        return self._share.lanes[-1][1] - self._share.lanes[0][0]

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        return self._share.n_batches

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"<PileLoader {self.store!r}: batch_size={s.batch_size}, rank {s.rank} of {s.world_size}, "
            f"{len(self)} batches ({self.n_rows:,} rows) per epoch from {self.n_piles} piles, seed={s.seed}, "
            f"{'' if s.order == 'piles' else f'order={s.order!r}, '}next epoch {self.epoch}>"
        )

    @property
    def dtypes(self) -> dict[str, np.dtype[Any]]:
        """The dtype of each variable in a numpy batch (for other batch formats, empty).

        Examples
        --------
        >>> str(PileLoader("piles.zarr", batch_size=100).dtypes["x"])
        'float32'
        """
        empty = self._piles.reader.empty()
        return {name: values.dtype for name, values in empty.items()} if isinstance(empty, dict) else {}

    def plan(self, epoch: int, start: int = 0, stop: int | None = None) -> BatchPlan:
        """Which rows of which piles make batches ``start:stop`` of ``epoch`` for this rank.

        A segment's ``pile`` is a read of the epoch: a group of units (with an
        ``order`` other than ``"piles"``, a stretch of its stream), read at
        once; :meth:`piles` names the store piles the reads take rows of.

        Examples
        --------
        >>> loader = PileLoader("piles.zarr", batch_size=100, rank=1, world_size=4)
        >>> plan = loader.plan(epoch=0, start=1)
        >>> len(plan), sum(segment.stop - segment.start for segment in plan.segments)
        (2, 150)
        """
        if self.settings.n_lanes is not None:
            raise DaskShuffleValueError(
                "Expected a loader without lanes (an order's n_lanes). Got one with lanes, whose batches join several "
                "plans instead; see piles() for what it reads.",
                parameter="n_lanes",
            )
        return self._share.plans(epoch, start, stop)[0]

    def piles(self, epoch: int | None = None) -> list[int]:
        """The store piles this rank's reads take rows of in ``epoch`` (by default the current one).

        Read after read, each read's piles in the order of the store: a group
        of units takes rows of many piles.

        Examples
        --------
        >>> loader = PileLoader("piles.zarr", batch_size=100, rank=1, world_size=4)
        >>> sorted(set(loader.piles(0))) == list(range(loader.n_piles))
        True
        """
        epoch = self.epoch if epoch is None else parse_count(epoch, "epoch")
        reads = self._piles.epoch_reads
        plans = self._share.plans(epoch)
        return [pile for plan in plans for segment in plan.segments for pile in reads.piles_of(epoch, segment.pile)]

    def close(self) -> None:
        """Stop the iterations in progress and the reads ahead, join the reader threads, close the store.

        An iteration open in another thread, and a range of batches, raise a
        :class:`~daskshuffle.DaskShuffleValueError` at their next batch. The
        loader may be iterated again.
        """
        if self._live_thread is threading.current_thread():
            self._close_live()
        self._piles.close()

    def __enter__(self) -> PileLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
