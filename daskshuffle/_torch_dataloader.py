"""PyTorch's side of :class:`~daskshuffle.torch.PileDataset`: what crosses between it and ``DataLoader`` workers."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from ._config import int_setting
from ._errors import DaskShuffleValueError

__all__ = [
    "Batch",
    "ByValue",
    "Pass",
    "Passes",
    "WorkerBatches",
    "make_dataloader",
    "to_tensor",
]

Batch = dict[str, torch.Tensor] | torch.Tensor | tuple[torch.Tensor, torch.Tensor]


def to_tensor(values: NDArray[Any]) -> torch.Tensor:
    if values.dtype.kind in "mM":  # datetimes and durations as integer counts of their unit
        values = values.view(np.int64)
    return torch.from_numpy(values)


class WorkerBatches:
    """Makes the arrays each batch is gathered into in a ``DataLoader`` worker process.

    A tensor crosses to the main process as a handle to shared storage (a file descriptor over a
    fresh connection: a fixed cost), so a batch of at least ``torch.shared-nbytes`` is gathered
    straight into one shared storage, and a smaller one into plain arrays sent by value (:class:`ByValue`).
    """

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] | None = None
        self.shared_nbytes = int_setting("torch.shared-nbytes")

    def __call__(
        self, n_rows: int, layout: Mapping[str, tuple[np.dtype[Any], tuple[int, ...]]]
    ) -> dict[str, NDArray[Any]]:
        spans, total = {}, 0
        for name, (dtype, shape) in layout.items():
            start = -(-total // 64) * 64  # each variable on a 64-byte boundary
            total = start + n_rows * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            spans[name] = (start, total)
        if total < self.shared_nbytes:
            self.tensors = None
            return {name: np.empty((n_rows, *shape), dtype=dtype) for name, (dtype, shape) in layout.items()}
        storage = torch.empty(total, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
        arrays: dict[str, NDArray[Any]] = {}
        self.tensors = {}
        for name, (dtype, shape) in layout.items():
            start, stop = spans[name]
            tensor = storage[start:stop].view(to_tensor(np.empty(0, dtype)).dtype).view(n_rows, *shape)
            self.tensors[name] = tensor
            arrays[name] = tensor.numpy().view(dtype)
        return arrays


def _each(batch: Any, convert: Callable[[Any], Any]) -> Any:
    """``batch`` (a dict, a pair or one array or tensor) with ``convert`` applied to each of its arrays."""
    if isinstance(batch, dict):
        return {name: convert(values) for name, values in batch.items()}
    if isinstance(batch, tuple):
        return tuple(convert(values) for values in batch)
    return convert(batch)


class ByValue:
    """A small batch of tensors on its way from a worker: pickled as numpy arrays, rebuilt as tensors.

    Not a mapping or a sequence, so that the ``DataLoader`` worker hands it over as it is.
    """

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def __reduce__(self) -> tuple[Any, tuple[Any, Any]]:
        return _each, (_each(self.batch, torch.Tensor.numpy), torch.from_numpy)


def make_dataloader(dataset: Any, stateful: bool, options: dict[str, Any]) -> Any:
    """A ``DataLoader`` (torchdata's ``StatefulDataLoader`` if ``stateful``) that hands out ``dataset``'s batches whole.

    No public API of torch tells a dataset how its ``DataLoader`` collates, so the options that
    would put batches together again are refused here, before any worker starts.
    """
    remedy = "PileDataset(store, batch_size=...) makes the batches; pass the DataLoader's other options only."
    if options.get("batch_size") is not None:
        raise DaskShuffleValueError(
            f"Expected no batch_size for the DataLoader. Got batch_size={options['batch_size']!r} instead, which would "
            f"put that many of the dataset's batches together; {remedy}",
            parameter="batch_size",
        )
    if options.get("collate_fn") is torch.utils.data.default_collate:
        raise DaskShuffleValueError(
            "Expected a collate_fn that takes one whole batch (it is called on each). Got default_collate instead, "
            f"which puts a list of items together; leave collate_fn out. {remedy}",
            parameter="collate_fn",
        )
    if options.get("drop_last"):
        raise DaskShuffleValueError(
            "Expected drop_last on the dataset, which cuts the batches. Got DataLoader(drop_last=True) instead; "
            "pass PileDataset(..., drop_last=True).",
            parameter="drop_last",
        )
    loader_class: Any = torch.utils.data.DataLoader
    if stateful:
        try:
            from torchdata.stateful_dataloader import StatefulDataLoader
        except ImportError as error:
            raise ImportError(
                "PileDataset.dataloader(stateful=True) needs torchdata, which is not installed. Install it with: "
                "pip install torchdata"
            ) from error
        loader_class = StatefulDataLoader
    elif options.get("num_workers"):
        loader_class = _PassesDataLoader
    return loader_class(dataset, **{**options, "batch_size": None})


class _PassesDataLoader(torch.utils.data.DataLoader):  # type: ignore[type-arg]
    """A ``DataLoader`` with worker processes that tells its dataset when a pass has been handed out to the end.

    Its workers read ahead of the training loop: until the last batch is taken the dataset's
    :meth:`~daskshuffle.torch.PileDataset.state_dict` refuses.
    """

    def __iter__(self) -> Any:
        passes: Passes = self.dataset._passes  # type: ignore[attr-defined]
        passes.handing_out(True)
        yield from super().__iter__()
        passes.handing_out(False)  # not on a pass broken off: what it did not hand out is not in any state


#: Fields of the epoch counter shared with worker processes (see :class:`Passes`).
_NEXT_EPOCH, _NEXT_START, _PASS_EPOCH, _PASS_START, _JOINED, _SIZE, _DONE, _HANDING_OUT = range(8)


class Passes:
    """The epochs of a dataset's passes, counted in shared memory seen by every ``DataLoader`` worker process.

    A ``DataLoader`` never tells the dataset in the main process that a pass begins; each worker
    calls ``iter(dataset)`` once per pass, so the first of a pass's workers takes the next epoch and
    the others join it. The counter is a shared tensor behind a lock.
    """

    def __init__(self, values: torch.Tensor | list[int] | None = None, lock: Any = None) -> None:
        if lock is None:  # a counter of its own (of a copy's ``values``): in new shared memory, with a new lock
            values = torch.tensor([0] * 8 if values is None else values, dtype=torch.int64)
            values.share_memory_()  # type: ignore[no-untyped-call]
            lock = multiprocessing.get_context("spawn").Lock()
        assert isinstance(values, torch.Tensor)  # handed to a worker process: the shared tensor, with its lock
        self.values = values
        self.lock = lock

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if multiprocessing.context.get_spawning_popen() is not None:  # on its way to a worker process: shared
            return Passes, (self.values, self.lock)
        return Passes, (self.values.tolist(),)  # a copy of the dataset counts on its own

    def next(self) -> tuple[int, int]:
        """The epoch of the next pass and the batch it starts at."""
        with self.lock:
            return int(self.values[_NEXT_EPOCH]), int(self.values[_NEXT_START])

    def set_next(self, epoch: int, start: int) -> None:
        with self.lock:
            self.values[_NEXT_EPOCH], self.values[_NEXT_START] = epoch, start
            self.values[_JOINED] = self.values[_SIZE]  # the pass in progress, if any, takes no more workers
            self.values[_DONE] = self.values[_SIZE]  # and is over: the next one starts where this says
            self.values[_HANDING_OUT] = 0

    def begin(self, n_workers: int | None, epoch: int | None = None) -> tuple[int, int]:
        """The epoch of a pass and the batch it starts at: a new pass, or (a worker) the pass its siblings began.

        A worker that resumes ``epoch`` from its own saved state gives it: the pass is ``epoch``'s, the next one
        ``epoch + 1``.
        """
        values = self.values
        with self.lock:
            joins = n_workers is not None and values[_JOINED] < values[_SIZE] and values[_SIZE] == n_workers
            if not joins or (epoch is not None and values[_PASS_EPOCH] != epoch):
                first = (values[_NEXT_EPOCH], values[_NEXT_START]) if epoch is None else (epoch, 0)
                values[_PASS_EPOCH], values[_PASS_START] = first
                values[_NEXT_EPOCH], values[_NEXT_START] = values[_PASS_EPOCH] + 1, 0
                values[_JOINED], values[_SIZE], values[_DONE] = 0, n_workers or 0, 0
            values[_JOINED] += 1
            return int(values[_PASS_EPOCH]), int(values[_PASS_START])

    def finish(self) -> None:
        """A worker yielded the last batch of its part of the pass."""
        with self.lock:
            self.values[_DONE] += 1

    def handing_out(self, busy: bool) -> None:
        """The main process's ``DataLoader`` begins a pass (``True``) or handed out its last batch (``False``)."""
        with self.lock:
            self.values[_HANDING_OUT] = int(busy)

    def workers_busy(self) -> bool:
        """Whether worker processes are in a pass, or broke one off, that the main process cannot see the end of."""
        with self.lock:
            values = self.values
            return bool(values[_HANDING_OUT]) or bool(values[_DONE] < values[_SIZE])


@dataclass
class Pass:
    """This process's part of a pass: batches ``[next, stop)`` of ``epoch`` are still to come."""

    epoch: int
    next: int
    stop: int
    worker: tuple[int, int] | None  # (id, num_workers) in a DataLoader worker process
