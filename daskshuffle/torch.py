"""PyTorch: a pile store as an ``IterableDataset`` of shuffled batches of tensors.

Needs PyTorch: ``pip install 'daskshuffle[torch]'``.

>>> from torch.utils.data import DataLoader
>>> from daskshuffle.torch import PileDataset
>>> dataset = PileDataset("piles.zarr", batch_size=100, features="x", label="y")
>>> for x, y in DataLoader(dataset, batch_size=None, num_workers=2):
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

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._errors import DaskShuffleTypeError, DaskShuffleValueError
from ._parse import parse_count, parse_variables
from .formats._base import NUMERIC_KINDS
from .loader._loader import LoaderSettings, PileLoader
from .plan._epoch_plan import split_batches
from .plan._streams import Stream

__all__ = ["PileDataset"]

Batch = dict[str, torch.Tensor] | torch.Tensor | tuple[torch.Tensor, torch.Tensor]


def _rank_and_world_size(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """What was given, else what ``torch.distributed`` says, else rank 0 of 1."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if rank is None:
        rank = torch.distributed.get_rank() if distributed else 0
    if world_size is None:
        world_size = torch.distributed.get_world_size() if distributed else 1
    return rank, world_size


def _parse_features(features: object) -> list[str] | None:
    if features is None:
        return None
    return parse_variables([features] if isinstance(features, str) else features)


def _torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    if dtype.kind in "mM":
        return torch.int64  # datetimes and durations as integer counts of their unit
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _to_tensor(values: NDArray[Any]) -> torch.Tensor:
    if values.dtype.kind in "mM":
        values = values.view(np.int64)
    return torch.from_numpy(values)


#: Batches of at least this many bytes cross from a worker process in shared memory, smaller ones by value.
SHARED_NBYTES = 4 * 2**20


class _WorkerBatches:
    """Makes the arrays each batch is gathered into in a ``DataLoader`` worker process.

    A worker sends what it yields to the main process through a pipe, pickled.
    A tensor goes as a handle to its storage, after the storage is copied into
    shared memory unless it is there already (``torch.multiprocessing.reductions``),
    so a batch gathered straight into shared memory crosses without a copy. But
    each handle is a file descriptor passed over a fresh connection
    (``multiprocessing.resource_sharer``), about 2 ms here whatever the size,
    while a pipe moves a 256 KiB batch by value in a tenth of that. So a batch
    of at least :data:`SHARED_NBYTES` is gathered into one new shared storage
    (one handle for all its variables), and a smaller one into plain arrays
    sent by value (see :class:`_ByValue`).
    """

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] | None = None

    def __call__(
        self, n_rows: int, layout: Mapping[str, tuple[np.dtype[Any], tuple[int, ...]]]
    ) -> dict[str, NDArray[Any]]:
        offsets, total = {}, 0
        for name, (dtype, shape) in layout.items():
            total = -(-total // 64) * 64  # each variable on a 64-byte boundary
            offsets[name] = total
            total += n_rows * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if total < SHARED_NBYTES:
            self.tensors = None
            return {name: np.empty((n_rows, *shape), dtype=dtype) for name, (dtype, shape) in layout.items()}
        storage = torch.empty(total, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
        arrays: dict[str, NDArray[Any]] = {}
        self.tensors = {}
        for name, (dtype, shape) in layout.items():
            nbytes = n_rows * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            tensor = storage[offsets[name] : offsets[name] + nbytes].view(_torch_dtype(dtype)).view(n_rows, *shape)
            self.tensors[name] = tensor
            arrays[name] = tensor.numpy().view(dtype)
        return arrays


def _from_numpy(batch: Any) -> Batch:
    if isinstance(batch, dict):
        return {name: torch.from_numpy(values) for name, values in batch.items()}
    if isinstance(batch, tuple):
        return torch.from_numpy(batch[0]), torch.from_numpy(batch[1])
    return torch.from_numpy(batch)


class _ByValue:
    """A small batch of tensors on its way from a worker: pickled as numpy arrays, rebuilt as tensors.

    Not a mapping or a sequence, so that the ``DataLoader`` worker hands it
    over as it is; the main process receives the tensors themselves.
    """

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        batch = self.batch
        if isinstance(batch, dict):
            return _from_numpy, ({name: tensor.numpy() for name, tensor in batch.items()},)
        if isinstance(batch, tuple):
            return _from_numpy, ((batch[0].numpy(), batch[1].numpy()),)
        return _from_numpy, (batch.numpy(),)


class PileDataset(IterableDataset):  # type: ignore[type-arg]
    """Shuffled batches of a pile store for ``torch.utils.data.DataLoader``.

    The same batches as :class:`daskshuffle.PileLoader`, as tensors. Under a
    ``DataLoader`` with ``num_workers=k`` each worker process takes its own
    contiguous run of this rank's batches, so no row is yielded twice and
    each worker reads only its own piles. Pass ``batch_size=None`` to the
    ``DataLoader``: the dataset yields whole batches.

    Each iteration runs one epoch and moves to the next. Worker processes
    work on copies of the dataset, so with ``num_workers > 0`` call
    :meth:`set_epoch` before every epoch, as with ``DistributedSampler``
    (persistent workers move on by themselves).

    Parameters
    ----------
    store : path or URL, Stream, or list of them
        A complete pile store, or several mixed (as for :class:`daskshuffle.PileLoader`).
    batch_size : int
        Rows per batch.
    seed, drop_last, piles_in_memory, order, shuffle_block_size, buffer_size, cycle_length, prefetch, variables, storage_options
        As for :class:`daskshuffle.PileLoader`.
    rank, world_size : int, optional
        By default those of ``torch.distributed`` when it is initialised, else 0 and 1.
    features : str or list of str, optional
        Yield ``features`` (one tensor: the named variables flattened per row
        and put side by side) instead of a dict of tensors; with ``label``,
        yield ``(features, label)``.
    label : str, optional
        The variable to yield as the label, next to ``features``.

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
        piles_in_memory: int = 1,
        order: str = "piles",
        shuffle_block_size: int | None = None,
        buffer_size: int | None = None,
        cycle_length: int | None = None,
        prefetch: int = 1,
        variables: Sequence[str] | None = None,
        features: str | Sequence[str] | None = None,
        label: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.features = _parse_features(features)
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
        rank, world_size = _rank_and_world_size(rank, world_size)
        self._options: dict[str, Any] = {
            "store": store,
            "batch_size": batch_size,
            "seed": seed,
            "rank": rank,
            "world_size": world_size,
            "drop_last": drop_last,
            "piles_in_memory": piles_in_memory,
            "order": order,
            "shuffle_block_size": shuffle_block_size,
            "buffer_size": buffer_size,
            "cycle_length": cycle_length,
            "prefetch": prefetch,
            "variables": chosen,
            "storage_options": storage_options,
        }
        # Check everything here, in the main process, before any worker starts.
        with PileLoader(**self._options) as loader:
            self.settings: LoaderSettings = loader.settings
            self.variables = loader.variables
            self._n_batches = len(loader)
            dtypes = loader.dtypes
        self._options["seed"] = self.settings.seed
        for name, dtype in dtypes.items():
            if dtype.kind not in NUMERIC_KINDS:
                raise DaskShuffleTypeError(
                    f"Expected variables that convert to tensors. Got {name!r} of dtype {dtype} instead; "
                    "leave it out with variables=[...]."
                )
        self._epoch = 0

    def __len__(self) -> int:
        """Batches this rank yields per epoch, over all worker processes."""
        return self._n_batches

    @property
    def epoch(self) -> int:
        """The epoch the next iteration yields."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration yield ``epoch``.

        Examples
        --------
        >>> from torch.utils.data import DataLoader
        >>> dataset = PileDataset("piles.zarr", batch_size=100)
        >>> for epoch in range(2):
        ...     dataset.set_epoch(epoch)
        ...     n_rows = sum(len(batch["id"]) for batch in DataLoader(dataset, batch_size=None, num_workers=2))
        >>> n_rows
        1000
        """
        self._epoch = parse_count(epoch, "epoch")

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        part, n_parts = (info.id, info.num_workers) if info is not None else (0, 1)
        first, stop = split_batches(self._n_batches, n_parts, part)
        epoch = self._epoch
        self._epoch += 1
        # In a worker process, batches are gathered for the trip to the main process (see _WorkerBatches).
        worker = _WorkerBatches() if info is not None else None
        with PileLoader(**self._options) as loader:
            for arrays in loader.iter_batches(epoch, first, stop, allocate=worker):
                if worker is None:
                    yield self._convert(arrays, shared=False)
                elif worker.tensors is not None:
                    yield self._convert(worker.tensors, shared=True)
                else:
                    yield _ByValue(self._convert(arrays, shared=False))  # type: ignore[misc]

    def _convert(self, batch: Mapping[str, Any], shared: bool) -> Batch:
        tensors = {
            name: values if isinstance(values, torch.Tensor) else _to_tensor(values) for name, values in batch.items()
        }
        if self.features is None:
            return tensors
        if len(self.features) == 1:
            features = tensors[self.features[0]]
        else:
            columns = [tensors[name].reshape(len(tensors[name]), -1) for name in self.features]
            dtype = columns[0].dtype
            for column in columns[1:]:
                dtype = torch.promote_types(dtype, column.dtype)
            features = torch.empty((len(columns[0]), sum(column.shape[1] for column in columns)), dtype=dtype)
            if shared:
                features.share_memory_()  # type: ignore[no-untyped-call]  # filled once, here, rather than copied again to cross processes
            torch.cat(columns, dim=1, out=features)
        if self.label is None:
            return features
        return features, tensors[self.label]
