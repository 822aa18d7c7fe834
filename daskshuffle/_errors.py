"""The errors daskshuffle raises: each subclasses :class:`DaskShuffleError` and the builtin a caller would catch."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Final

#: The errors, each exported by ``daskshuffle`` as well.
__all__ = [
    "CorruptPileStoreError",
    "DaskShuffleError",
    "DaskShuffleTypeError",
    "DaskShuffleValueError",
    "IncompletePileStoreError",
    "IneffectiveSettingWarning",
    "NoWorkersError",
    "PileStoreExistsError",
    "ShuffleInterrupted",
    "SourceChangedError",
    "SourceMismatchError",
    "SourceNotFoundError",
    "StorageAccessError",
    "StorageFullError",
    "StorageNotFoundError",
    "StoreChangedError",
    "UnfinishedShuffleError",
    "UnsafePathError",
    "VerificationError",
]


class _Named(enum.Enum):
    NAMED = "named"


#: The value of an :class:`Argument` that names the argument alone, without a value to pass.
NAMED: Final = _Named.NAMED


@dataclasses.dataclass(frozen=True)
class Argument:
    """An argument that an error's message names: Python's spelling in ``str(error)``, an option's on the command line.

    ``Argument("pile_memory")`` reads ``pile_memory``, ``Argument("overwrite", True)`` ``overwrite=True``,
    ``Argument("variables", ...)`` ``variables=[...]``.

    Examples
    --------
    >>> from daskshuffle._errors import Argument
    >>> str(Argument("n_piles", 64, passed=True))
    'pass n_piles=64'
    """

    name: str
    value: object = NAMED
    #: Whether the text is advice to pass the value ("pass overwrite=True"), not a mention of it.
    passed: bool = False

    def __str__(self) -> str:
        if self.value is NAMED:
            text = self.name
        elif self.value is Ellipsis:
            text = f"{self.name}=[...]"
        else:
            text = f"{self.name}={self.value!r}"
        return f"pass {text}" if self.passed else text


#: A message: text, or text and the arguments it names, in order.
Message = str | Sequence[str | Argument]


class DaskShuffleError(Exception):
    """Base class of every error raised by daskshuffle.

    ``parameter`` names the argument the error is about, if any: the command line reports it as a
    usage error naming the option. :meth:`spelled` spells the message's arguments another way (as
    the command line's options); ``str(error)`` spells them as Python's.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> try:
    ...     ds.PileLoader("piles.zarr", batch_size=0)
    ... except ds.DaskShuffleValueError as error:
    ...     print(error.parameter)
    ...     print(error.spelled(lambda argument: "--" + argument.name.replace("_", "-")))
    batch_size
    Expected --batch-size to be a positive integer. Got 0 instead.
    """

    def __init__(self, message: Message, *, parameter: str | None = None) -> None:
        self.parts: tuple[str | Argument, ...] = (message,) if isinstance(message, str) else tuple(message)
        super().__init__(self.spelled(str))
        self.parameter = parameter

    def spelled(self, spell: Callable[[Argument], str]) -> str:
        """The message, with each argument it names spelled by ``spell``."""
        return "".join(part if isinstance(part, str) else spell(part) for part in self.parts)


class DaskShuffleValueError(DaskShuffleError, ValueError):
    """An argument or the data has a value daskshuffle cannot work with."""


class DaskShuffleTypeError(DaskShuffleError, TypeError):
    """An argument has a type daskshuffle cannot work with."""


class SourceNotFoundError(DaskShuffleError, FileNotFoundError):
    """A source path or URL does not exist."""


class PileStoreExistsError(DaskShuffleError, FileExistsError):
    """The destination exists and ``overwrite=True`` was not given, or it is not a pile store: never replaced."""


class IncompletePileStoreError(DaskShuffleValueError):
    """A store is not a complete pile store (for example, its shuffle was interrupted)."""


class SourceChangedError(DaskShuffleValueError):
    """The sources of a pile store changed since it was written: a rerun of its shuffle does not return it.

    A pile store records its sources' identity (file sizes and versions, a collection's dask token);
    the message names what changed. Pass ``overwrite=True`` to shuffle them again.
    """


class UnfinishedShuffleError(IncompletePileStoreError):
    """A store whose shuffle did not finish: it is marked incomplete and must not be read."""


class CorruptPileStoreError(DaskShuffleError, OSError):
    """A file of a complete pile store is missing, truncated or fails its checksum.

    The error names the pile, the variable and the file: shuffle again, or restore the file.
    """


class ShuffleInterrupted(KeyboardInterrupt):
    """A shuffle stopped by Ctrl-C (on the command line, also by SIGTERM).

    A :class:`KeyboardInterrupt`, as the interrupt it replaces; its message says what the shuffle left
    on disk, that running it again continues it, and whether the cluster's workers stopped too.
    """


class NoWorkersError(DaskShuffleError, RuntimeError):
    """The active cluster has no workers left to run a shuffle's tasks.

    Raised before anything is submitted, instead of a wait that would never end. In a notebook the
    usual cause is an interrupt, which reaches the workers of a ``LocalCluster`` that ``Client()``
    started. Start new workers (``client.close(); client = Client()``) and run the shuffle again: it
    continues. An adaptive cluster must keep one worker: ``cluster.adapt(minimum=1, ...)``.

    Workers started while the kernel ignores SIGINT outlive its interrupts::

        import signal
        from distributed import Client

        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            client = Client()  # its LocalCluster's worker processes ignore SIGINT
        finally:
            signal.signal(signal.SIGINT, previous)

    A cluster started outside the kernel (``Client("tcp://...")``) is out of its reach too.
    """


class StoreChangedError(CorruptPileStoreError):
    """A file a loader needs is gone because the store changed since the loader opened it.

    ``evict`` and ``compact`` remove the files of the generations they drop; a loader opened before
    raises this at the first pile whose files are gone (nothing is damaged). Open a new loader.
    """


class StorageAccessError(DaskShuffleError, PermissionError):
    """Storage did not serve a request: nothing was read wrong, the storage could not be reached.

    ``reason`` says why: ``"credentials"`` (none found, or invalid), ``"refused"`` (access denied),
    ``"throttled"`` (after every retry), ``"unreachable"`` (timeouts, broken connections) or
    ``"server"``. ``url`` is the location. The message says where it was reached from and what to do.
    """

    def __init__(
        self,
        message: Message,
        *,
        parameter: str | None = "storage_options",
        reason: str = "refused",
        url: str | None = None,
    ) -> None:
        super().__init__(message, parameter=parameter)
        self.reason = reason
        self.url = url


class StorageNotFoundError(DaskShuffleError, FileNotFoundError):
    """The bucket (or container) a destination or ``tmp=`` URL names does not exist.

    Raised before anything is written: daskshuffle never creates a bucket.
    """


class StorageFullError(DaskShuffleError, OSError):
    """The disk (or quota) filled up while a shuffle wrote; what it wrote is removed."""


class UnsafePathError(DaskShuffleError, FileExistsError):
    """A path where daskshuffle writes or removes its own files holds something it did not make.

    A symbolic link (or another kind of file) at a path of daskshuffle's own (``<dst>.daskshuffle-lock``,
    ``<dst>.daskshuffle-tmp``, the cache) is not written, truncated or removed through; the message
    names it, to be removed by hand or avoided with another destination.
    """


class VerificationError(DaskShuffleError, ValueError):
    """A pile store (or the text output of ``shuffle_lines(verify=True)``) does not hold the same rows as its source.

    ``variable`` names the first variable (or column) whose rows differ.
    """

    def __init__(self, message: Message, *, variable: str | None = None) -> None:
        super().__init__(message)
        self.variable = variable


class SourceMismatchError(VerificationError):
    """The sources given to :func:`~daskshuffle.verify` are not those the pile store was made from.

    Their rows (or blocks) do not add up to what the store records: wrong, missing or changed
    sources, not a damaged store. The message names the counts compared.
    """


class IneffectiveSettingWarning(UserWarning):
    """A setting that does nothing for this call (``n_piles`` above the rows, say): what it costs, what to pass."""
