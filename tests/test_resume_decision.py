"""The resume decision, without I/O: every combination of what the store holds and what the call asks."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from daskshuffle import CorruptPileStoreError, PileStoreExistsError, SourceChangedError
from daskshuffle._errors import DaskShuffleValueError
from daskshuffle.pilestore import RUN_KEY
from daskshuffle.shuffle._resume import (
    Done,
    Earlier,
    Fresh,
    Refuse,
    Resume,
    ResumeOptions,
    Seen,
    decide,
    earlier_seed,
)

PLANNED: dict[str, Any] = {
    "fingerprint": "this",
    "kind": "zarr",
    "seed": 5,
    "settings": {"n_piles": 4},
    "source_identity": [{"name": "a.zarr", "files": 1, "bytes": 10, "digest": "d1"}],
}
#: The earlier record's relation to this call's plan: the same shuffle, another shuffle, this one of
#: sources changed since, or a record without the sources' identity (damaged).
RELATIONS = {
    "same": {},
    "other": {"fingerprint": "that", "settings": {"n_piles": 8}},
    "changed": {
        "fingerprint": "that",
        "source_identity": [{"name": "a.zarr", "files": 1, "bytes": 11, "digest": "d2"}],
    },
    "unidentified": {"fingerprint": "that", "source_identity": None},
}


def _earlier(relation: str, at_dst: bool, complete: bool, created: bool) -> Earlier:
    metadata = {**PLANNED, **RELATIONS[relation], "complete": complete, RUN_KEY: "run-1", "seed": 3}
    return Earlier("file:///earlier", metadata, at_dst=at_dst, created=created)


def _expected(store: Seen, options: ResumeOptions) -> type | tuple[type, type]:
    """The decision, as a table: what the module's docstring says, case by case."""
    if store.foreign:
        return Refuse, PileStoreExistsError  # what no shuffle wrote, whatever the call
    earlier = store.earlier if not options.overwrite else None
    if earlier is not None and not options.resumable and not (earlier.at_dst and earlier.metadata["complete"]):
        earlier = None  # a source that cannot be continued: only its complete store is recognised
    if earlier is None:
        return (Refuse, PileStoreExistsError) if store.dst_exists and not options.overwrite else Fresh
    if earlier.metadata["source_identity"] is None:
        return Refuse, CorruptPileStoreError
    relation = "same" if earlier.metadata["fingerprint"] == "this" else str(earlier.metadata["settings"])
    complete = earlier.at_dst and earlier.metadata["complete"]
    if relation != "same" and earlier.metadata["settings"] == PLANNED["settings"]:
        return Refuse, SourceChangedError
    if complete:
        return Done if relation == "same" else (Refuse, PileStoreExistsError)
    if relation != "same":
        return Refuse, DaskShuffleValueError
    if store.dst_exists and not earlier.at_dst:
        return Refuse, PileStoreExistsError
    return Resume if earlier.created else Fresh


def _stores() -> list[Seen]:
    stores = [Seen(dst_exists=exists) for exists in (False, True)] + [Seen(dst_exists=True, foreign=True)]
    for relation, at_dst, complete, created, exists in itertools.product(
        RELATIONS, (False, True), (False, True), (False, True), (False, True)
    ):
        if at_dst and not exists:
            continue  # a record at dst is something at dst
        stores.append(Seen(dst_exists=exists, earlier=_earlier(relation, at_dst, complete, created)))
    return stores


CASES = [
    (store, ResumeOptions(overwrite=overwrite, resumable=resumable, seed_given=given))
    for store in _stores()
    for overwrite, resumable, given in itertools.product((False, True), repeat=3)
]


@pytest.mark.parametrize(("store", "options"), CASES)
def test_every_case_decides_as_the_table_says(store: Seen, options: ResumeOptions) -> None:
    decision = decide(store, PLANNED, options, "file:///dst")
    expected = _expected(store, options)
    if isinstance(expected, tuple):
        assert isinstance(decision, Refuse)
        assert type(decision.error) is expected[1], decision.error
        assert "Expected" in str(decision.error)
    else:
        assert type(decision) is expected
    if isinstance(decision, Resume | Done):
        assert decision.run == "run-1", "a continued store keeps its run"
    if isinstance(decision, Resume):
        assert decision.url == "file:///earlier"
    if isinstance(decision, Fresh) and store.earlier is None:
        assert decision.run is None, "a new store draws its own run"
    assert decide(store, PLANNED, options, "file:///dst") == decision or isinstance(decision, Refuse)


def test_the_table_covers_every_outcome_and_error() -> None:
    outcomes = {decide(store, PLANNED, options).__class__ for store, options in CASES}
    errors = {
        type(decision.error)
        for decision in (decide(store, PLANNED, options) for store, options in CASES)
        if isinstance(decision, Refuse)
    }
    assert outcomes == {Fresh, Resume, Done, Refuse}
    assert errors == {PileStoreExistsError, SourceChangedError, DaskShuffleValueError, CorruptPileStoreError}
    assert len(CASES) == 8 * (3 + 4 * 12)


@pytest.mark.parametrize(("store", "options"), CASES)
def test_a_drawn_seed_is_the_earlier_runs_only_where_that_run_counts(store: Seen, options: ResumeOptions) -> None:
    earlier = store.earlier
    counts = (
        earlier is not None
        and not options.overwrite
        and (options.resumable or (earlier.at_dst and bool(earlier.metadata["complete"])))
    )
    expected = 3 if counts and not options.seed_given else 5
    assert earlier_seed(store, options, 5) == expected


def test_the_errors_say_what_to_do() -> None:
    changed = decide(Seen(True, _earlier("changed", True, True, True)), PLANNED, ResumeOptions(False, True))
    assert isinstance(changed, Refuse) and "return it as it is" in str(changed.error)
    interrupted = decide(Seen(True, _earlier("changed", True, False, True)), PLANNED, ResumeOptions(False, True))
    assert isinstance(interrupted, Refuse) and "continue its interrupted shuffle" in str(interrupted.error)
    other = decide(Seen(True, _earlier("other", True, False, True)), PLANNED, ResumeOptions(False, True))
    assert isinstance(other, Refuse) and "settings" in str(other.error) and "overwrite=True" in str(other.error)
    damaged = decide(Seen(True, _earlier("unidentified", True, True, True)), PLANNED, ResumeOptions(False, True))
    assert isinstance(damaged, Refuse) and "source_identity, a list. Got None instead" in str(damaged.error)
    assert "shuffle the source again with overwrite=True" in str(damaged.error)
    exists = decide(Seen(True), PLANNED, ResumeOptions(False, False), "/data/piles.zarr")
    assert isinstance(exists, Refuse) and "'/data/piles.zarr'" in str(exists.error)
    foreign = decide(Seen(True, foreign=True), PLANNED, ResumeOptions(True, True), "/data/mine")
    assert isinstance(foreign, Refuse) and "'/data/mine', which holds something else" in str(foreign.error)
    assert "even with overwrite=True" in str(foreign.error) and foreign.error.parameter == "dst"
