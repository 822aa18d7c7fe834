"""The errors daskshuffle raises.

Every error subclasses :class:`DaskShuffleError` and the builtin a caller would
catch without knowing the library (``ValueError``, ``TypeError``,
``FileNotFoundError``, ``FileExistsError``), so both ``except ValueError`` and
``except daskshuffle.DaskShuffleError`` work.
"""

from __future__ import annotations

__all__ = [
    "CorruptPileStoreError",
    "DaskShuffleError",
    "DaskShuffleTypeError",
    "DaskShuffleValueError",
    "IncompletePileStoreError",
    "PileStoreExistsError",
    "ShuffleInterrupted",
    "SourceNotFoundError",
    "StorageAccessError",
    "StorageFullError",
    "StorageNotFoundError",
    "StoreChangedError",
    "UnfinishedShuffleError",
    "VerificationError",
]


class DaskShuffleError(Exception):
    """Base class of every error raised by daskshuffle.

    ``parameter`` names the argument the error is about, when there is one
    (``"n_piles"``, ``"pile_memory"``, ``"overwrite"``): the command line uses
    it to report a bad option as a usage error, spelled as the option.

    Examples
    --------
    >>> import daskshuffle as ds
    >>> try:
    ...     ds.PileLoader("piles.zarr", batch_size=0)
    ... except ds.DaskShuffleValueError as error:
    ...     print(error.parameter)
    batch_size
    """

    def __init__(self, message: str, *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class DaskShuffleValueError(DaskShuffleError, ValueError):
    """An argument or the data has a value daskshuffle cannot work with."""


class DaskShuffleTypeError(DaskShuffleError, TypeError):
    """An argument has a type daskshuffle cannot work with."""


class SourceNotFoundError(DaskShuffleError, FileNotFoundError):
    """A source path or URL does not exist."""


class PileStoreExistsError(DaskShuffleError, FileExistsError):
    """The destination exists and ``overwrite=True`` was not given."""


class IncompletePileStoreError(DaskShuffleValueError):
    """A store is not a complete pile store (for example, its shuffle was interrupted)."""


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
    on disk, how large, and that running it again the same way continues it.
    """


class StoreChangedError(CorruptPileStoreError):
    """A file a loader needs is gone because the store changed since the loader opened it.

    ``evict`` and ``compact`` remove the files of the generations they drop; a
    loader opened before reads the store as it was, and raises this error (not
    plain :class:`CorruptPileStoreError`: nothing is damaged) at the first
    pile whose files are gone. Open a new loader to read the store as it is now.
    """


class StorageAccessError(DaskShuffleError, PermissionError):
    """Storage refused a request: wrong or missing credentials, or no permission for the path.

    The message names the URL and says where credentials come from
    (``storage_options`` or the environment).
    """


class StorageNotFoundError(DaskShuffleError, FileNotFoundError):
    """The bucket (or container) a destination or ``tmp=`` URL names does not exist.

    Raised before anything is written: daskshuffle never creates a bucket.
    """


class StorageFullError(DaskShuffleError, OSError):
    """The disk (or quota) filled up while a shuffle wrote; what it wrote is removed."""


class VerificationError(DaskShuffleError, ValueError):
    """A pile store does not hold the same rows as its source.

    ``variable`` names the first variable (or column) whose rows differ.
    """

    def __init__(self, message: str, *, variable: str | None = None) -> None:
        super().__init__(message)
        self.variable = variable
