"""PyTorch's side of :class:`~daskshuffle.torch.PileDataset`: what crosses between it and ``DataLoader`` workers.

:class:`Passes` counts the epochs of a dataset's passes in memory shared with
its worker processes; :class:`WorkerBatches` gathers a worker's batches into
shared memory, or into plain arrays sent by value (:class:`ByValue`);
:func:`collating_fetcher` is the one adapter to torch's internals. Imports
torch at the top: :mod:`daskshuffle.torch` names the package to install first.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

__all__ = [
    "SHARED_NBYTES",
    "Batch",
    "ByValue",
    "Pass",
    "Passes",
    "WorkerBatches",
    "collating_fetcher",
    "to_tensor",
]

Batch = dict[str, torch.Tensor] | torch.Tensor | tuple[torch.Tensor, torch.Tensor]


def _torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    if dtype.kind in "mM":
        return torch.int64  # datetimes and durations as integer counts of their unit
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def to_tensor(values: NDArray[Any]) -> torch.Tensor:
    if values.dtype.kind in "mM":
        values = values.view(np.int64)
    return torch.from_numpy(values)


#: Batches of at least this many bytes cross from a worker process in shared memory, smaller ones by value.
SHARED_NBYTES = 4 * 2**20


class WorkerBatches:
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
    sent by value (see :class:`ByValue`).
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


class ByValue:
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


def collating_fetcher() -> bool:
    """Whether ``iter(dataset)`` was called by a ``DataLoader`` fetcher that puts items together into batches.

    The fetcher calls ``iter(dataset)`` in its ``__init__``; which objects are
    fetchers is torch's internals, known to :mod:`daskshuffle._compat._torch`.
    """
    from ._compat import is_collating_fetcher

    try:
        frame = sys._getframe(2)  # this function, PileDataset.__iter__, then its caller
    except ValueError:  # iter(dataset) at the top of a script
        return False
    return is_collating_fetcher(frame.f_locals.get("self"))


#: Fields of the epoch counter shared with worker processes (see :class:`Passes`).
_NEXT_EPOCH, _NEXT_START, _PASS_EPOCH, _PASS_START, _JOINED, _SIZE = range(6)


class Passes:
    """The epochs of a dataset's passes, counted in shared memory seen by every ``DataLoader`` worker process.

    A ``DataLoader`` hands its worker processes copies of the dataset (forked,
    or pickled with ``spawn``) and never tells the dataset in the main process
    that a pass begins. Each worker calls ``iter(dataset)`` once per pass, as it
    starts (or, with ``persistent_workers``, as each pass begins), so the first
    of a pass's ``num_workers`` workers to get here takes the next epoch and
    the others join it. The counter lives in a shared tensor behind a lock,
    which the copies share with the original.
    """

    def __init__(self) -> None:
        self.values = torch.zeros(6, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self.lock = multiprocessing.get_context("spawn").Lock()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if multiprocessing.context.get_spawning_popen() is not None:  # on its way to a worker process: shared
            return _shared_passes, (self.values, self.lock)
        return _copied_passes, (self.values.tolist(),)  # a copy of the dataset counts on its own

    def next(self) -> tuple[int, int]:
        """The epoch of the next pass and the batch it starts at."""
        with self.lock:
            return int(self.values[_NEXT_EPOCH]), int(self.values[_NEXT_START])

    def set_next(self, epoch: int, start: int) -> None:
        with self.lock:
            self.values[_NEXT_EPOCH], self.values[_NEXT_START] = epoch, start
            self.values[_JOINED] = self.values[_SIZE]  # the pass in progress, if any, takes no more workers

    def begin(self, n_workers: int | None) -> tuple[int, int]:
        """The epoch of a pass and the batch it starts at: a new pass, or (a worker) the pass its siblings began."""
        values = self.values
        with self.lock:
            if n_workers is None or values[_JOINED] >= values[_SIZE] or values[_SIZE] != n_workers:
                values[_PASS_EPOCH], values[_PASS_START] = values[_NEXT_EPOCH], values[_NEXT_START]
                values[_NEXT_EPOCH] += 1
                values[_NEXT_START] = 0
                values[_JOINED], values[_SIZE] = 0, n_workers or 0
            values[_JOINED] += 1
            return int(values[_PASS_EPOCH]), int(values[_PASS_START])

    def join(self, epoch: int, n_workers: int) -> None:
        """A worker resumes ``epoch`` from its own saved state: the pass is ``epoch``'s, the next one ``epoch + 1``."""
        values = self.values
        with self.lock:
            if values[_JOINED] >= values[_SIZE] or values[_SIZE] != n_workers or values[_PASS_EPOCH] != epoch:
                values[_PASS_EPOCH], values[_PASS_START] = epoch, 0
                values[_NEXT_EPOCH], values[_NEXT_START] = epoch + 1, 0
                values[_JOINED], values[_SIZE] = 0, n_workers
            values[_JOINED] += 1


def _shared_passes(values: torch.Tensor, lock: Any) -> Passes:
    passes = Passes.__new__(Passes)
    passes.values, passes.lock = values, lock
    return passes


def _copied_passes(values: list[int]) -> Passes:
    passes = Passes()
    passes.values[:] = torch.tensor(values, dtype=torch.int64)
    return passes


@dataclass
class Pass:
    """This process's part of a pass: batches ``[next, stop)`` of ``epoch`` are still to come."""

    epoch: int
    next: int
    stop: int
    worker: tuple[int, int] | None  # (id, num_workers) in a DataLoader worker process
