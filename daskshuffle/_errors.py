"""The errors daskshuffle raises.

Every error subclasses :class:`DaskShuffleError` and the builtin a caller would
catch without knowing the library (``ValueError``, ``TypeError``,
``FileNotFoundError``, ``FileExistsError``), so both ``except ValueError`` and
``except daskshuffle.DaskShuffleError`` work.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Final

#: The errors, each exported by ``daskshuffle`` as well. (``Argument`` and ``NAMED``, which messages are
#: made of, stay inside the library.)
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

    ``Argument("pile_memory")`` reads ``pile_memory`` (``--pile-memory``),
    ``Argument("overwrite", True)`` reads ``overwrite=True`` (``--overwrite``),
    ``Argument("variables", ...)`` reads ``variables=[...]`` (``--variables NAMES``), and
    ``Argument("header", False, passed=True)`` reads ``pass header=False`` (``leave out --header``).

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

    ``parameter`` names the argument the error is about, when there is one
    (``"n_piles"``, ``"pile_memory"``, ``"overwrite"``): the command line uses
    it to report a bad option as a usage error, exit status 2, naming the option.
    A message given as text and :class:`Argument` parts is ``str(error)`` with
    Python's spellings; :meth:`spelled` spells the arguments another way (the
    command line spells them as its options).

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

    A pile store records its sources' identity (sizes and versions of their
    files, the dask token of a collection). The same shuffle run again against
    sources that changed (new values, same shape) raises this error, naming
    what changed, rather than returning the old rows; pass ``overwrite=True``
    to shuffle them again. An ``append`` of them raises it too.
    """


class UnfinishedShuffleError(IncompletePileStoreError):
    """A store whose shuffle did not finish: it is marked incomplete and must not be read."""


class CorruptPileStoreError(DaskShuffleError, OSError):
    """A file of a complete pile store is missing, truncated or fails its checksum.

    Nothing is read from such a store silently: the error names the pile, the
    variable and the file, so that the damage can be found and the store
    shuffled again (or the file restored).
    """


class ShuffleInterrupted(KeyboardInterrupt):
    """A shuffle stopped by Ctrl-C (on the command line, also by SIGTERM).

    A :class:`KeyboardInterrupt`, as the interrupt it replaces (``except
    Exception`` does not catch it); its message says what the shuffle left
    on disk, how large, and that running it again the same way continues it;
    on a distributed cluster, also whether the interrupt stopped the cluster's
    workers, and then how to start new ones (see :class:`NoWorkersError`).
    """


class NoWorkersError(DaskShuffleError, RuntimeError):
    """The active cluster has no workers left to run a shuffle's tasks.

    Raised before anything is submitted, instead of a wait that would never end.
    In a notebook the usual cause is an interrupt (the kernel's "Interrupt", or
    Ctrl-C in a terminal), which reaches every process of the kernel's process
    group, the workers of a ``LocalCluster`` started by ``Client()`` included.
    Start new workers (``client.close(); client = Client()``, or restart the
    cluster) and run the shuffle again: it continues what the interrupted run
    left. A cluster that starts workers only once there is work (adaptive with
    ``minimum=0``) must keep one running: ``cluster.adapt(minimum=1, ...)``.

    Workers started while the kernel ignores SIGINT inherit that and outlive its
    interrupts (the interrupt still stops the shuffle, whose tasks the cluster
    then cancels)::

        import signal
        from distributed import Client

        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            client = Client()  # its LocalCluster's worker processes ignore SIGINT
        finally:
            signal.signal(signal.SIGINT, previous)

    A cluster started outside the kernel (``dask scheduler`` and ``dask
    worker`` in a terminal, ``Client("tcp://...")``) is out of its reach too.
    """


class StoreChangedError(CorruptPileStoreError):
    """A file a loader needs is gone because the store changed since the loader opened it.

    ``evict`` and ``compact`` remove the files of the generations they drop; a
    loader opened before reads the store as it was, and raises this error (not
    plain :class:`CorruptPileStoreError`: nothing is damaged) at the first
    pile whose files are gone. Open a new loader to read the store as it is now.
    """


class StorageAccessError(DaskShuffleError, PermissionError):
    """Storage did not serve a request: nothing was read wrong, the storage could not be reached.

    ``reason`` says why: ``"credentials"`` (none found, or refused as invalid),
    ``"refused"`` (access denied), ``"throttled"`` (too many requests, after
    every retry), ``"unreachable"`` (timeouts, connections refused or broken)
    or ``"server"`` (server errors). ``url`` is the location. The message names
    the URL, where it was reached from (this process or the cluster's workers)
    and what to do: where credentials come from (``storage_options`` or the
    environment), or that nothing is damaged and the request can be tried
    again. A damaged store raises :class:`CorruptPileStoreError` instead.
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

    daskshuffle writes beside a destination (``<dst>.daskshuffle-lock``,
    ``<dst>.daskshuffle-tmp``, ...) and in its cache only files it makes
    itself. A symbolic link (or another kind of file) found at one of those
    paths was placed there by someone else: nothing is written, truncated or
    removed through it, and the message names it, to be removed by hand or
    avoided with another destination.
    """


class VerificationError(DaskShuffleError, ValueError):
    """A pile store does not hold the same rows as its source.

    ``variable`` names the first variable (or column) whose rows differ.
    """

    def __init__(self, message: Message, *, variable: str | None = None) -> None:
        super().__init__(message)
        self.variable = variable


class SourceMismatchError(VerificationError):
    """The sources given to :func:`~daskshuffle.verify` are not those the pile store was made from.

    Their rows (or, when the checksums differ, their blocks) do not add up to
    what the store records: wrong or missing sources, or sources changed since
    the shuffle, not a damaged store. The message names the counts compared and
    the sources the store records, where it records them.
    """


class IneffectiveSettingWarning(UserWarning):
    """A setting that does nothing for this call (``n_piles`` above the rows, say): what it costs, what to pass."""
