"""PyTorch: a pile store as an ``IterableDataset`` of shuffled batches of tensors.

Needs PyTorch: ``pip install 'daskshuffle[torch]'``.

>>> from daskshuffle.torch import PileDataset
>>> dataset = PileDataset("piles.zarr", batch_size=100, features="x", label="y")
>>> for x, y in dataset.dataloader(num_workers=2):
...     assert x.shape == (100, 8) and y.shape == (100,)  # train_step(x, y)
"""

from __future__ import annotations

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as error:  # pragma: no cover - exercised in a subprocess without torch
    raise ImportError(
        "daskshuffle.torch needs PyTorch, which is not installed. Install it with: pip install 'daskshuffle[torch]'"
    ) from error

import functools
import os
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

from ._errors import DaskShuffleTypeError, DaskShuffleValueError
from ._parse import parse_count, parse_variables
from ._torch_dataloader import Batch, ByValue, Pass, Passes, WorkerBatches, make_dataloader, to_tensor
from .epochs import Order, OrderName, Stream, split_batches
from .formats import NUMERIC_KINDS
from .loader import LoaderSettings, PileLoader
from .storage import Cache, parse_cache

__all__ = ["PileDataset"]


#: Version of the dict that :meth:`PileDataset.state_dict` returns.
STATE_VERSION = 1


class PileDataset(IterableDataset):  # type: ignore[type-arg]
    """Shuffled batches of a pile store for ``torch.utils.data.DataLoader``.

    The same batches as :class:`daskshuffle.PileLoader`, as tensors. Under a ``DataLoader`` with
    ``num_workers=k`` each worker takes its own contiguous run of this rank's batches. Use
    :meth:`dataloader` to make the ``DataLoader``: it hands whole batches out (``batch_size=None``).

    Each pass of a ``DataLoader`` runs one epoch and moves to the next, with or without worker
    processes; :meth:`set_epoch` chooses the next epoch. One dataset serves one pass at a time.

    :meth:`state_dict` and :meth:`load_state_dict` resume exactly, as torchdata's
    ``StatefulDataLoader`` uses them (with the same ``num_workers``). A state saved in the main
    process loads into any number of workers. With a plain ``DataLoader`` and workers, the dataset
    cannot see the batches go by: its :meth:`state_dict` is refused during a pass and says where the
    next pass starts between passes; to save mid-epoch, use ``dataloader(stateful=True)``.

    Parameters
    ----------
    store : path or URL, Stream, or list of them
        A complete pile store, or several mixed (as for :class:`daskshuffle.PileLoader`).
    batch_size : int
        Rows per batch.
    seed, drop_last, order, prefetch, variables, storage_options, cache
        As for :class:`daskshuffle.PileLoader`; worker processes share ``cache``. With an order's
        ``n_lanes``, a state saved with one ``world_size`` loads with another.
    rank, world_size : int, optional
        By default those of ``torch.distributed`` when it is initialised, else 0 and 1.
    features : str or list of str, optional
        Yield one tensor of features instead of a dict of tensors; with ``label``, yield
        ``(features, label)``. One variable keeps its shape (``(batch_size, 32, 32, 3)``); several
        are flattened per row, side by side, in one ``(batch_size, n)`` tensor of their common
        dtype (``x`` of ``(16,)`` and ``z`` of ``(2, 2)`` give ``(batch_size, 20)``).
    label : str, optional
        The variable to yield as the label, next to ``features``.

    Raises
    ------
    DaskShuffleTypeError
        For a variable that does not convert to a tensor.
    DaskShuffleValueError
        As for :class:`daskshuffle.PileLoader`: settings that do not go
        together; ``label`` without ``features``; ``variables`` with them.

    Examples
    --------
    >>> dataset = PileDataset("piles.zarr", batch_size=256)
    >>> batch = next(iter(dataset))
    >>> batch["x"].shape, batch["x"].dtype
    (torch.Size([256, 8]), torch.float32)
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Stream | Sequence[str | os.PathLike[str] | Stream],
        batch_size: int,
        *,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        order: Order | OrderName = "piles",
        prefetch: str = "auto",
        variables: Sequence[str] | None = None,
        features: str | Sequence[str] | None = None,
        label: str | None = None,
        storage_options: dict[str, Any] | None = None,
        cache: str | os.PathLike[str] | Cache | None = None,
    ) -> None:
        super().__init__()
        self.features = parse_variables([features] if isinstance(features, str) else features, "features")
        if label is not None and not isinstance(label, str):
            raise DaskShuffleTypeError(f"Expected label to be the name of a variable. Got {label!r} instead.")
        if label is not None and self.features is None:
            raise DaskShuffleValueError(
                f"Expected features to be given with label. Got label={label!r} alone instead; "
                "name the feature variables too, or drop label to get a dict of every variable."
            )
        self.label = label
        chosen = parse_variables(variables)
        if self.features is not None:
            if chosen is not None:
                raise DaskShuffleValueError(
                    "Expected either variables or features and label. Got both instead; "
                    "features and label already choose what is read."
                )
            chosen = self.features + ([label] if label is not None else [])
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if rank is None:  # what was given, else what torch.distributed says, else rank 0 of 1
            rank = torch.distributed.get_rank() if distributed else 0
        if world_size is None:
            world_size = torch.distributed.get_world_size() if distributed else 1
        self._options: dict[str, Any] = {
            "store": store,
            "batch_size": batch_size,
            "seed": seed,
            "rank": rank,
            "world_size": world_size,
            "drop_last": drop_last,
            "order": order,
            "prefetch": prefetch,
            "variables": chosen,
            "storage_options": storage_options,
            "cache": parse_cache(cache),
        }
        # Check everything here, in the main process, before any worker starts.
        with PileLoader(**self._options) as loader:
            self.settings: LoaderSettings = loader.settings
            self.variables = loader.variables
            self._n_batches = len(loader)
            dtypes = loader.dtypes
            self._loader_state = loader.state_dict()
        self._options["seed"] = self.settings.seed
        for name, dtype in dtypes.items():
            if dtype.kind not in NUMERIC_KINDS:
                raise DaskShuffleTypeError(
                    f"Expected variables that convert to tensors. Got {name!r} of dtype {dtype} instead; "
                    "leave it out with variables=[...]."
                )
        self._passes = Passes()
        self._pass: Pass | None = None  # this process's pass in progress
        self._resume: Pass | None = None  # a worker's saved pass, for its next one

    def __len__(self) -> int:
        """Batches this rank yields per epoch, over all worker processes."""
        return self._n_batches

    @property
    def epoch(self) -> int:
        """The epoch the next pass yields."""
        return self._passes.next()[0]

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass yield ``epoch``, from its first batch.

        Examples
        --------
        >>> dataset = PileDataset("piles.zarr", batch_size=100)
        >>> for epoch in range(2):
        ...     dataset.set_epoch(epoch)
        ...     n_rows = sum(len(batch["id"]) for batch in dataset.dataloader(num_workers=2))
        >>> n_rows
        1000
        """
        self._passes.set_next(parse_count(epoch, "epoch"), 0)

    def dataloader(self, *, stateful: bool = False, **options: Any) -> Any:
        """The ``DataLoader`` of this dataset's batches, handed out whole (``batch_size=None``).

        Parameters
        ----------
        stateful : bool
            Make torchdata's ``StatefulDataLoader`` (its ``state_dict`` resumes
            exactly, in every worker), else ``torch.utils.data.DataLoader``.
        **options
            The ``DataLoader``'s options: ``num_workers``, ``pin_memory``,
            ``persistent_workers``, ``collate_fn`` (called on each whole batch), ...

        Raises
        ------
        DaskShuffleValueError
            For a ``batch_size``, ``collate_fn=default_collate`` or
            ``drop_last=True``, which would put batches together again or
            belong to the dataset.

        Examples
        --------
        >>> dataset = PileDataset("piles.zarr", batch_size=100)
        >>> sum(len(batch["id"]) for batch in dataset.dataloader(num_workers=2))
        1000
        """
        return make_dataloader(self, stateful, options)

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        if info is None:  # the epoch is taken when the first batch is asked for: an iterator never used takes none
            return self._batches(None)
        part, self._resume = self._resume, None
        if part is not None:
            self._passes.begin(info.num_workers, part.epoch)
        else:
            # Every worker of a pass gets here as the pass begins, whether or not it is asked for a batch.
            epoch, start = self._passes.begin(info.num_workers)
            first, stop = split_batches(self._n_batches - start, info.num_workers, info.id)
            part = Pass(epoch, start + first, start + stop, (info.id, info.num_workers))
        self._pass = part  # StatefulDataLoader asks for the state before the first batch
        return self._batches(part)

    def _batches(self, part: Pass | None) -> Generator[Batch, None, None]:
        if part is None:
            epoch, start = self._passes.begin(None)
            part = self._pass = Pass(epoch, start, self._n_batches, None)
        worker = part.worker
        # In a worker process, batches are gathered for the trip to the main process (see WorkerBatches).
        gather = WorkerBatches() if worker is not None else None
        try:
            with PileLoader(**self._options) as loader:
                for arrays in loader.iter_batches(part.epoch, part.next, part.stop, allocate=gather):
                    part.next += 1  # counted before the batch leaves: a state saved after it has it
                    if gather is None:
                        yield self._convert(arrays, shared=False)
                    elif gather.tensors is not None:
                        yield self._convert(gather.tensors, shared=True)
                    else:
                        yield ByValue(self._convert(arrays, shared=False))  # type: ignore[misc]
            if worker is not None:
                self._passes.finish()
        finally:
            if worker is None and self._pass is part:
                self._pass = None  # the main process's pass is over: what comes next is the next pass

    # -- resumption ----------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the dataset is: a small JSON-serialisable dict for :meth:`load_state_dict`.

        In the main process, the batches the next pass yields; in a worker process (as
        ``StatefulDataLoader`` asks), those this worker has yet to yield.

        Examples
        --------
        >>> dataset = PileDataset("piles.zarr", batch_size=100)
        >>> batches = iter(dataset)
        >>> first, second = next(batches), next(batches)
        >>> state = dataset.state_dict()
        >>> state["loader"]["epoch"], state["loader"]["batches"]
        (0, 2)
        """
        part = self._pass
        if part is None and get_worker_info() is None and self._passes.workers_busy():
            raise DaskShuffleValueError(
                "Expected a state taken between the passes of a DataLoader with worker processes. Got a pass in "
                "progress (or broken off) instead: its workers read ahead of the training loop, so no state taken "
                "here says which batches the loop has had. Make the DataLoader with dataset.dataloader(stateful=True) "
                "(torchdata's StatefulDataLoader asks each worker) and save its state_dict(), or save the dataset's "
                "state after a pass ends; after a pass broken off, dataset.set_epoch(epoch) says where to go on."
            )
        if part is None:
            epoch, start = self._passes.next()
            part = Pass(epoch, start, self._n_batches, None)
        return {
            "version": STATE_VERSION,
            "loader": {**self._loader_state, "epoch": part.epoch, "batches": part.next},
            "stop": part.stop,
            "worker": None if part.worker is None else list(part.worker),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly where the dataset that saved ``state`` stopped.

        A main process's state makes the next pass yield the rest of its epoch, over any number of
        workers; a worker's state loads into the worker of the same number. A state of another
        store or other settings is refused, as by :meth:`daskshuffle.PileLoader.load_state_dict`.

        Examples
        --------
        >>> first = PileDataset("piles.zarr", batch_size=100)
        >>> batches = iter(first)
        >>> skipped = [next(batches) for _ in range(3)]
        >>> resumed = PileDataset("piles.zarr", batch_size=100)
        >>> resumed.load_state_dict(first.state_dict())
        >>> bool((next(iter(resumed))["id"] == next(batches)["id"]).all())
        True
        """
        keys = ["loader", "stop", "version", "worker"]
        if not isinstance(state, Mapping) or sorted(state) != keys or state["version"] != STATE_VERSION:
            raise DaskShuffleValueError(
                f"Expected a dict returned by PileDataset.state_dict(), of version {STATE_VERSION} with the keys "
                f"{keys}. Got {state!r} instead."
            )
        with PileLoader(**self._options) as loader:
            loader.load_state_dict(state["loader"])  # refuses a state of another store or other settings
        epoch, start = int(state["loader"]["epoch"]), int(state["loader"]["batches"])
        worker = state["worker"]
        info = get_worker_info()
        if worker is None:
            self._passes.set_next(epoch, start)
            self._pass = self._resume = None
            return
        here = None if info is None else [info.id, info.num_workers]
        if list(worker) != here:
            raise DaskShuffleValueError(
                f"Expected the state of this process's part of a pass (worker {here}). Got the state of worker "
                f"{list(worker)} instead; a worker's state loads into the worker of the same number, with the "
                "same num_workers, as StatefulDataLoader does."
            )
        stop = parse_count(state["stop"], "the state's stop")
        self._resume = Pass(epoch, start, min(stop, self._n_batches), (worker[0], worker[1]))

    def _convert(self, batch: Mapping[str, Any], shared: bool) -> Batch:
        tensors = {
            name: values if isinstance(values, torch.Tensor) else to_tensor(values) for name, values in batch.items()
        }
        if self.features is None:
            return tensors
        if len(self.features) == 1:
            features = tensors[self.features[0]]
        else:
            columns = [tensors[name].reshape(len(tensors[name]), -1) for name in self.features]
            dtype = functools.reduce(torch.promote_types, [column.dtype for column in columns])
            features = torch.empty((len(columns[0]), sum(column.shape[1] for column in columns)), dtype=dtype)
            if shared:
                features.share_memory_()  # type: ignore[no-untyped-call]  # filled once, here, rather than copied again to cross processes
            torch.cat(columns, dim=1, out=features)
        if self.label is None:
            return features
        return features, tensors[self.label]
