"""What a shuffle does with what it finds at its destination: one pure decision, carried out by ``_run.py``.

:func:`decide` returns :class:`Fresh`, :class:`Resume`, :class:`Done` or :class:`Refuse`
and does no I/O, so every case is tested without a store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import Argument, DaskShuffleError, DaskShuffleValueError, PileStoreExistsError
from ..pilestore import RUN_KEY
from ._destination import exists_error
from ._store_plan import differences, missing_identity, source_changed_error

__all__ = [
    "Done",
    "Earlier",
    "Refuse",
    "Resume",
    "ResumeOptions",
    "Seen",
    "check_sources_unchanged",
    "counted_earlier",
    "decide",
    "earlier_seed",
]


@dataclass(frozen=True)
class Earlier:
    """The record of an earlier run of a shuffle, as read: at ``dst`` or where a store is built beside it."""

    url: str
    metadata: Mapping[str, Any]
    at_dst: bool
    #: Whether its manifest marks its store and pieces' directories created (else nothing of it can be continued).
    created: bool = False

    @property
    def complete(self) -> bool:
        """Whether it is the finished store at ``dst`` (else an interrupted run's)."""
        return self.at_dst and bool(self.metadata.get("complete"))


@dataclass(frozen=True)
class Seen:
    """What is at the destination, read once the lock is held."""

    #: Something is at ``dst`` (a store of this library or anything else).
    dst_exists: bool
    #: The record of an earlier run, read only for a resumable shuffle without ``overwrite``.
    earlier: Earlier | None = None
    #: What is at ``dst`` is not a pile store (it has none's metadata) nor an empty directory: never replaced.
    foreign: bool = False


@dataclass(frozen=True)
class ResumeOptions:
    """What of the call decides: ``overwrite``, and whether the shuffle can be resumed (a source on storage)."""

    overwrite: bool
    resumable: bool
    #: Whether the seed was given (else drawn, and the earlier run's is taken).
    seed_given: bool = True


@dataclass(frozen=True)
class Fresh:
    """Write a new store (built beside ``dst`` if something is there); ``run`` is kept, or drawn when ``None``."""

    run: str | None = None


@dataclass(frozen=True)
class Resume:
    """Continue the earlier run's store at ``url``, with its run, skipping the tasks its manifest lists."""

    url: str
    run: str | None


@dataclass(frozen=True)
class Done:
    """The same shuffle's complete store is at ``dst``: return it, after removing what a killed run left."""

    run: str | None


@dataclass(frozen=True)
class Refuse:
    """Write nothing: raise ``error``."""

    error: DaskShuffleError


Decision = Fresh | Resume | Done | Refuse


def earlier_seed(store: Seen, options: ResumeOptions, seed: int) -> int:
    """The seed to plan with: an earlier run's, if the seed was drawn and that run is considered, else ``seed``."""
    earlier = counted_earlier(store, options)
    if earlier is not None and not options.seed_given:
        return int(earlier.metadata["seed"])
    return seed


def counted_earlier(store: Seen, options: ResumeOptions) -> Earlier | None:
    """The earlier run that counts: none with ``overwrite``; of a source that cannot be continued, only a complete store."""
    earlier = store.earlier
    if earlier is None or options.overwrite:
        return None
    if not options.resumable and not earlier.complete:
        return None  # an in-memory source: its store is recognised when complete, never continued
    return earlier


def decide(store: Seen, planned: Mapping[str, Any], options: ResumeOptions, dst: str = "dst") -> Decision:
    """What a shuffle whose planned store records ``planned`` does with what ``store`` holds.

    An earlier run counts only without ``overwrite`` (and, for a source that cannot
    be continued, only as a complete store at ``dst``); one of other sources or of
    another shuffle is refused. Something at ``dst`` that no shuffle wrote is
    refused whatever the call. ``dst`` is only named in the errors.

    Examples
    --------
    >>> decide(Seen(dst_exists=False), {"fingerprint": "a"}, ResumeOptions(overwrite=False, resumable=True))
    Fresh(run=None)
    >>> decide(Seen(dst_exists=True), {"fingerprint": "a"}, ResumeOptions(overwrite=False, resumable=True)).error
    PileStoreExistsError(...)
    """
    if store.dst_exists and store.foreign:
        return Refuse(_foreign_error(dst))
    earlier = counted_earlier(store, options)
    if earlier is None:
        if store.dst_exists and not options.overwrite:
            return Refuse(exists_error(dst))
        return Fresh()
    recorded = dict(earlier.metadata)
    damaged = missing_identity(recorded, earlier.url)
    if damaged is not None:  # no rerun can tell whether its sources changed
        return Refuse(damaged)
    same = recorded.get("fingerprint") == planned.get("fingerprint")
    run = str(recorded.get(RUN_KEY)) if recorded.get(RUN_KEY) else None
    if not same and not differences(recorded, dict(planned)):
        changed = source_changed_error(earlier.url, recorded, planned["source_identity"], complete=earlier.complete)
        if changed is not None:
            return Refuse(changed)
    if earlier.complete:
        if same:
            return Done(run)
        return Refuse(exists_error(dst)) if store.dst_exists else Fresh()
    if not same:
        return Refuse(_other_shuffle_error(earlier.url, differences(recorded, dict(planned))))
    if store.dst_exists and not earlier.at_dst:
        return Refuse(exists_error(dst))
    if earlier.created:
        return Resume(earlier.url, run)
    return Fresh(run)


def check_sources_unchanged(
    earlier: Earlier, kind: str, sources: Sequence[Any], identity: list[dict[str, Any]], variables: Sequence[str] | None
) -> None:
    """Refuse a rerun whose sources changed since the ``earlier`` run's store was written.

    A rerun of the same kind, naming (some of) the same sources and variables,
    compares their identity (files, sizes, versions) before any chunk is read: a
    file added, removed, renamed or rewritten is named in a
    :class:`~daskshuffle.SourceChangedError`. ``variables`` ``None``: not known
    before the source is opened, so not compared.
    """
    recorded = earlier.metadata
    named = recorded.get("source")
    if recorded.get("kind") != kind or not isinstance(named, list):
        return
    if variables is not None and recorded.get("variables") != list(variables):
        return
    if not set(map(str, named)) & set(map(str, sources)):
        return  # another shuffle: what is at dst is decided on as a store of other sources
    damaged = missing_identity(recorded, earlier.url)
    if damaged is not None:
        raise damaged
    changed = source_changed_error(earlier.url, recorded, identity, complete=earlier.complete)
    if changed is not None:
        raise changed


def _foreign_error(dst: str) -> DaskShuffleError:
    return PileStoreExistsError(
        (
            f"Expected dst to be a pile store or not to exist. Got {dst!r}, which holds something else (no pile "
            "store's metadata), instead; daskshuffle replaces only a pile store, even with ",
            Argument("overwrite", True),
            ": choose another destination, or remove what is there yourself.",
        ),
        parameter="dst",
    )


def _other_shuffle_error(url: str, differing: list[str]) -> DaskShuffleError:
    return DaskShuffleValueError(
        (
            f"Expected the same shuffle as the interrupted one at {url!r}. Got other "
            f"{', '.join(differing) or 'arguments'} instead; run the same call to continue it, or ",
            Argument("overwrite", True, passed=True),
            " to start over.",
        ),
        parameter="overwrite",
    )
