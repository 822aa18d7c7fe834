"""Storage that does not serve a request is named as such, never as a damaged store.

Against moto's S3 server on loopback, directly or through a proxy that
throttles, hangs or drops the conditions of writes (``s3.FaultyProxy``). Each
test sets its own environment: no credentials from this machine (no
``~/.aws``, no instance metadata), only those a test gives.
"""

from __future__ import annotations

import gc
import json
import re
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Points, make_zarr_source

import daskshuffle as ds
from daskshuffle.storage import _lock
from daskshuffle.storage._deadline import request_deadline
from daskshuffle.storage._location import Location

pytestmark = pytest.mark.s3

#: Fail fast: one botocore attempt a request (s3fs still retries a few times), a deadline of 6 s. Late in a whole
#: run the loopback server has taken over 2 s to answer the opening of a store, which a deadline of 3 s called
#: unreachable.
FAST = {"retries": {"max_attempts": 1}, "connect_timeout": 2, "read_timeout": 2}


def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An environment with no credentials at all, whose look-ups never leave this machine."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name in (
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata service
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


def _zarr_store(local: Path, s3: Any) -> str:
    source = make_zarr_source(local / "raw.zarr", 2_000, chunk_rows=250)
    ds.shuffle_zarr(source, s3.url("piles.zarr"), 4, seed=0, storage_options=s3.storage_options)
    return s3.url("piles.zarr")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> str:
    """A Zarr pile store in a bucket of its own, shared by the tests that only read it (none writes to it)."""
    from s3 import new_bucket

    return _zarr_store(tmp_path_factory.mktemp("store"), new_bucket(s3_endpoint))


@pytest.fixture
def own_store(tmp_path: Path, s3: Any) -> str:
    """A Zarr pile store in the test's bucket, for a test that changes it."""
    return _zarr_store(tmp_path, s3)


@pytest.fixture(scope="module")
def parquet_store(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> str:
    """A Parquet pile store of 3,000 rows in a bucket of its own, shared by the tests that only read it."""
    import pandas as pd
    from s3 import new_bucket

    s3 = new_bucket(s3_endpoint)
    local = tmp_path_factory.mktemp("parquet") / "raw.parquet"
    pd.DataFrame({"id": range(3_000), "x": [float(i) for i in range(3_000)]}).to_parquet(local)
    ds.shuffle_parquet(str(local), s3.url("piles.parquet"), n_piles=3, seed=0, storage_options=s3.storage_options)
    return s3.url("piles.parquet")


@pytest.fixture
def proxy(s3: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import s3fs
    from s3 import FaultyProxy

    # s3fs tries a throttled request 5 times, backing off 1.9 s in all; twice names the fault the same way, sooner.
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 2)
    proxy = FaultyProxy(s3.endpoint, hang_seconds=5)  # longer than FAST's read timeout
    yield proxy
    proxy.close()


def test_a_loader_without_credentials_names_the_store_and_how_to_pass_them(
    store: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_credentials(monkeypatch, tmp_path)
    endpoint_only = {"client_kwargs": {"endpoint_url": s3.endpoint}}
    with pytest.raises(ds.StorageAccessError, match="no usable credentials") as caught:
        ds.PileLoader(store, batch_size=100, storage_options=endpoint_only)
    error = caught.value
    assert isinstance(error, PermissionError) and error.reason == "credentials" and error.url == store
    assert store in str(error) and "storage_options" in str(error) and "AWS_ACCESS_KEY_ID" in str(error)
    with pytest.raises(ds.StorageAccessError, match="no usable credentials"):
        ds.verify(store, storage_options=endpoint_only)


def test_a_shuffle_without_credentials_is_refused_before_writing(
    tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=100)
    _no_credentials(monkeypatch, tmp_path)
    with pytest.raises(ds.StorageAccessError, match=r"s3://.*piles\.zarr.*no usable credentials"):
        ds.shuffle_zarr(
            source, s3.url("piles.zarr"), 2, seed=0, storage_options={"client_kwargs": {"endpoint_url": s3.endpoint}}
        )
    assert s3.fs.ls(s3.bucket, refresh=True) == []


def test_a_misspelt_storage_option_is_named(store: str, s3: Any, tmp_path: Path) -> None:
    misspelt = {**s3.storage_options, "secrett": "x"}
    with pytest.raises(ds.DaskShuffleValueError, match=r"'secrett'.*did you mean 'secret'") as caught:
        ds.PileLoader(store, batch_size=100, storage_options=misspelt)
    assert caught.value.parameter == "storage_options" and store in str(caught.value)
    source = make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=100)
    with pytest.raises(ds.DaskShuffleValueError, match="'secrett'"):
        ds.shuffle_zarr(source, s3.url("other.zarr"), 2, seed=0, storage_options=misspelt)
    assert not s3.fs.exists(f"{s3.bucket}/other.zarr")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "reason", "said"),
    [("throttle", "throttled", "throttled"), ("hang", "unreachable", "no answer")],
)
def test_a_zarr_store_that_is_throttled_or_silent_is_not_called_damaged(
    store: str, proxy: Any, fault: str, reason: str, said: str
) -> None:
    loader = ds.PileLoader(store, batch_size=100, seed=0, prefetch="0B", storage_options=proxy.storage_options(**FAST))
    proxy.fault, proxy.only = fault, "/c/"  # the chunk files only: the store was opened
    with pytest.raises(ds.StorageAccessError, match=said) as caught:
        next(iter(loader))
    loader.close()
    error = caught.value
    assert not isinstance(error, ds.CorruptPileStoreError) and error.reason == reason
    assert "nothing is damaged" in str(error) and "restore" not in str(error)
    assert store in str(error) and "max_attempts" in str(error)


@pytest.mark.slow
def test_a_parquet_store_that_is_throttled_is_not_called_damaged(parquet_store: str, proxy: Any) -> None:
    store = parquet_store
    loader = ds.PileLoader(store, batch_size=100, seed=0, prefetch="0B", storage_options=proxy.storage_options(**FAST))
    proxy.fault, proxy.only = "throttle", "/part-"
    with pytest.raises(ds.StorageAccessError, match="throttled") as caught:
        next(iter(loader))
    loader.close()
    assert not isinstance(caught.value, ds.CorruptPileStoreError) and "part-" in str(caught.value)


def test_a_missing_chunk_is_still_damage(own_store: str, s3: Any) -> None:
    store = own_store
    s3.fs.rm_file(f"{store.removeprefix('s3://')}/x/c/0/0")
    with (
        ds.PileLoader(store, batch_size=2_000, storage_options=s3.storage_options) as loader,
        pytest.raises(ds.CorruptPileStoreError, match="no such file"),
    ):
        next(iter(loader))


def test_conditional_writes_are_probed_once_per_bucket_and_the_probe_removed(s3: Any, proxy: Any) -> None:
    options = proxy.storage_options()
    first = Location.of(s3.url("a.zarr"), options)
    assert first.conditional_writes, "moto refuses a second create of one object"
    puts = proxy.seen.get("PUT", 0)
    assert puts == 2
    assert Location.of(s3.url("b/c.zarr"), options).conditional_writes and proxy.seen["PUT"] == puts, "asked once"
    assert s3.fs.ls(s3.bucket, refresh=True) == [], "the probe object is removed"


@pytest.mark.slow
def test_a_server_that_ignores_conditions_gets_the_unexcluded_lock(tmp_path: Path, s3: Any, proxy: Any) -> None:
    _lock._warned.clear()
    proxy.fault = "unconditional"  # as a server that ignores If-None-Match
    options = proxy.storage_options()
    assert not Location.of(s3.url("piles.zarr"), options).conditional_writes
    source = make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=100)
    with pytest.warns(UserWarning, match=r"no conditional write at s3://.*not refused"):
        ds.shuffle_zarr(source, s3.url("piles.zarr"), 2, seed=0, storage_options=options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per bucket
        ds.shuffle_zarr(source, s3.url("more.zarr"), 2, seed=0, storage_options=options)
    names = sorted(path.rsplit("/", 1)[-1] for path in s3.fs.ls(s3.bucket, refresh=True))
    assert names == ["more.zarr", "piles.zarr"], "no lock or probe object left"


@pytest.fixture(scope="module")
def bare_workers(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The scheduler of a cluster whose one worker process has no credentials, shared by the module's tests.

    The worker finds the server through ``AWS_ENDPOINT_URL``, and started while
    no credentials were in the environment, which it keeps; this process's
    environment is as it was once the cluster has started.
    """
    from distributed import LocalCluster

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
        _no_credentials(patch, tmp_path_factory.mktemp("no-aws"))
        cluster = LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
        )
    with cluster:
        yield cluster.scheduler_address


@pytest.fixture
def bare_cluster(bare_workers: str, s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The cluster of :func:`bare_workers`, and this process with the credentials its worker lacks (as a notebook's)."""
    from s3 import KEY, SECRET

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    _no_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    return bare_workers


WORKERS_LACK = r"on every worker of the cluster\. Got 1 worker \(tcp://127\.0\.0\.1:\d+\) with no usable credentials"


@pytest.mark.slow
@pytest.mark.cluster
def test_workers_without_the_credentials_of_this_process_are_named(bare_cluster: str, s3: Any, tmp_path: Path) -> None:
    from distributed import Client

    source = s3.put(make_zarr_source(tmp_path / "raw.zarr", 1_000, chunk_rows=100), "raw.zarr")
    dst = s3.url("piles.zarr")
    with Client(bare_cluster) as client, client.as_current():
        with pytest.raises(ds.StorageAccessError, match=WORKERS_LACK) as caught:
            ds.shuffle_zarr(source, dst, 2, seed=0)
        assert caught.value.reason == "credentials" and "where the workers run" in str(caught.value)
        assert "storage_options travel with the tasks" in str(caught.value)
        assert not s3.fs.exists(dst.removeprefix("s3://")), "refused before anything was written"
        # What the error advises: credentials in storage_options reach the workers with the tasks.
        ds.shuffle_zarr(source, dst, 2, seed=0, storage_options=s3.storage_options)
        with pytest.raises(ds.StorageAccessError, match=WORKERS_LACK):
            ds.verify(dst)
        assert ds.verify(dst, storage_options=s3.storage_options).n_rows == 1_000


@pytest.mark.slow
@pytest.mark.cluster
def test_the_command_line_says_in_one_line_that_the_workers_lack_credentials(
    bare_cluster: str, s3: Any, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    source = s3.put(make_zarr_source(tmp_path / "raw.zarr", 1_000, chunk_rows=100), "raw.zarr")
    dst = s3.url("piles.zarr")
    ds.shuffle_zarr(source, dst, 2, seed=0, storage_options=s3.storage_options)
    assert CliRunner().invoke(cli, ["info", dst]).exit_code == 0, "this process reaches the store"
    verified = CliRunner().invoke(cli, ["verify", dst, "--scheduler", bare_cluster])
    assert verified.exit_code == 1, verified.output
    lines = [line for line in verified.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in verified.output, verified.output
    assert re.search(WORKERS_LACK, lines[0]) and "AWS_ACCESS_KEY_ID" in lines[0], lines[0]


#: Requests of a reader that storage refuses or throttles: ``(fault, path, reason, entry)``. The loader and
#: ``verify`` open the store through one reader (``readers.open_pile_reader``, whose ``location.reaching`` names
#: the fault): each request is tried through one of them, and each of them meets both faults.
READER_REQUESTS = {
    "root-metadata-refused": ("deny", "piles.zarr/zarr.json", "refused", "loader"),
    "root-metadata-throttled": ("throttle", "piles.zarr/zarr.json", "throttled", "verify"),
    "array-metadata-refused": ("deny", "/x/zarr.json", "refused", "verify"),
    "array-metadata-throttled": ("throttle", "/x/zarr.json", "throttled", "loader"),
    "crc32c-table-refused": ("deny", "/x/daskshuffle-crc32c", "refused", "loader"),
    "crc32c-table-throttled": ("throttle", "/x/daskshuffle-crc32c", "throttled", "verify"),
}


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "only", "reason", "entry"), READER_REQUESTS.values(), ids=READER_REQUESTS.keys())
def test_every_request_of_a_reader_that_storage_does_not_serve_is_named_by_its_kind(
    store: str, proxy: Any, fault: str, only: str, reason: str, entry: str
) -> None:
    proxy.fault, proxy.only = fault, only
    options = proxy.storage_options(**FAST)
    with pytest.raises(ds.StorageAccessError) as caught:
        if entry == "loader":
            with ds.PileLoader(store, batch_size=100, seed=0, storage_options=options) as loader:
                next(iter(loader))
        else:
            ds.verify(store, storage_options=options)
    error = caught.value
    assert proxy.faulted > 0, "the request was made, and failed"
    assert error.reason == reason and error.url == store, str(error)
    assert not isinstance(error, ds.CorruptPileStoreError | ds.IncompletePileStoreError)
    assert ("nothing is damaged" in str(error)) == (reason == "throttled")


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["throttle", "deny"])
def test_a_loader_that_caches_names_the_requests_storage_does_not_serve(
    store: str, proxy: Any, tmp_path: Path, fault: str
) -> None:
    options = proxy.storage_options(**FAST)
    proxy.fault, proxy.only = fault, "/c/"
    with (
        ds.PileLoader(store, batch_size=100, seed=0, storage_options=options, cache=tmp_path / "cache") as loader,
        pytest.raises(ds.StorageAccessError) as caught,
    ):
        next(iter(loader))
    assert caught.value.reason == {"throttle": "throttled", "deny": "refused"}[fault] and caught.value.url == store
    proxy.fault = None
    with ds.PileLoader(store, batch_size=2_000, seed=0, storage_options=options, cache=tmp_path / "cache") as loader:
        assert len(next(iter(loader))["id"]) == 2_000, "nothing of the failed read was kept"


@pytest.mark.slow
def test_a_source_whose_metadata_storage_refuses_is_named_so(tmp_path: Path, s3: Any, proxy: Any) -> None:
    source = s3.put(make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=100), "raw.zarr")
    proxy.fault, proxy.only = "deny", "raw.zarr/zarr.json"
    with pytest.raises(ds.StorageAccessError) as caught:
        ds.shuffle_zarr(source, s3.url("piles.zarr"), 2, seed=0, storage_options=proxy.storage_options(**FAST))
    assert caught.value.reason == "refused" and caught.value.url == source, str(caught.value)
    assert proxy.faulted > 0


@pytest.mark.slow
def test_a_source_whose_chunks_storage_throttles_is_named_so(tmp_path: Path, s3: Any, proxy: Any) -> None:
    source = s3.put(make_zarr_source(tmp_path / "raw.zarr", 500, chunk_rows=100), "raw.zarr")
    options = proxy.storage_options(**FAST)
    Location.of(s3.url("piles.zarr"), options).conditional_writes  # noqa: B018  # probed before the faults
    proxy.fault, proxy.only, proxy.methods = "throttle", "raw.zarr/x/c/", frozenset({"GET"})
    with pytest.raises(ds.StorageAccessError) as caught:
        ds.shuffle_zarr(source, s3.url("piles.zarr"), 2, seed=0, storage_options=options)
    assert caught.value.reason == "throttled" and "raw.zarr" in str(caught.value), str(caught.value)
    assert proxy.faulted > 0


#: Requests of a shuffle that storage refuses or throttles: ``(fault, path, methods, reason)``.
SHUFFLE_REQUESTS = {
    "chunk-writes-throttled": ("throttle", "piles.zarr/x/c/", {"PUT"}, "throttled"),
    "chunk-writes-refused": ("deny", "piles.zarr/x/c/", {"PUT"}, "refused"),
    "records-of-writes-throttled": ("throttle", "daskshuffle-writes", {"PUT"}, "throttled"),
    "piece-writes-throttled": ("throttle", "scratch/", {"PUT"}, "throttled"),
    "piece-reads-throttled": ("throttle", "scratch/", {"GET"}, "throttled"),
    "listings-throttled": ("throttle", "list-type", {"GET"}, "throttled"),
    "deletes-throttled": ("throttle", "?delete", {"POST"}, "throttled"),
}


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "only", "methods", "reason"), SHUFFLE_REQUESTS.values(), ids=SHUFFLE_REQUESTS.keys())
def test_every_request_of_a_shuffle_that_storage_does_not_serve_is_named_by_its_kind(
    tmp_path: Path, s3: Any, proxy: Any, fault: str, only: str, methods: set[str], reason: str
) -> None:
    source = make_zarr_source(tmp_path / "raw.zarr", 1_000, chunk_rows=250)
    options = proxy.storage_options(**FAST)
    Location.of(s3.url("piles.zarr"), options).conditional_writes  # noqa: B018  # probed before the faults
    proxy.fault, proxy.only, proxy.methods = fault, only, frozenset(methods)
    with pytest.raises(ds.StorageAccessError) as caught:
        ds.shuffle_zarr(source, s3.url("piles.zarr"), 4, seed=0, tmp=s3.url("scratch"), storage_options=options)
    error = caught.value
    assert proxy.faulted > 0, "the request was made, and failed"
    assert error.reason == reason and str(error.url).startswith(f"s3://{s3.bucket}/"), str(error)
    assert ("nothing is damaged" in str(error)) == (reason == "throttled")


@pytest.fixture
def stalling(s3: Any) -> Iterator[Any]:
    """A proxy whose stalled requests stay unanswered longer than any test waits."""
    from s3 import FaultyProxy

    # The test's deadlines are 3 s, and the loopback server runs in this process: a full garbage collection of a
    # process late in a run stops it, and the client, for up to seconds. Collected now, and the survivors frozen
    # out of the collections during the test, none stops them long.
    gc.collect()
    gc.freeze()
    proxy = FaultyProxy(s3.endpoint, hang_seconds=120)
    yield proxy
    proxy.fault = None
    proxy.close()
    gc.unfreeze()


@pytest.mark.slow
def test_a_stalled_read_fails_within_a_deadline_that_follows_from_the_options(
    store: str, s3: Any, stalling: Any
) -> None:
    # Long enough for a loaded loopback server to answer the opening of the store before the stall.
    options = stalling.storage_options(read_timeout=1, retries={"max_attempts": 1})
    deadline = request_deadline(options)
    assert deadline == 3, "two attempts of 1 s, and one more"
    n_chunks = len([path for path in s3.fs.find(store) if "/c/" in path])
    with ds.PileLoader(store, batch_size=100, seed=0, storage_options=options) as loader:
        stalling.fault, stalling.only = "hang", "/c/"
        started = time.perf_counter()
        with pytest.raises(ds.StorageAccessError, match=r"no answer.*within 3 s") as caught:
            next(iter(loader))
        took = time.perf_counter() - started
    assert caught.value.reason == "unreachable" and caught.value.url == store
    # Without the deadline, s3fs's nested retries try each request 50 times: over 30 s and 150 requests here.
    assert took < 10 * deadline, took
    attempts = deadline / 1 + 1  # of one request (a HEAD and a GET of a chunk may both be made)
    assert stalling.faulted <= 2 * attempts * n_chunks, (stalling.faulted, n_chunks)


#: The metadata requests of opening a Zarr pile store (the root group, an array's, a crc32c table), each with the
#: entry point that tries it. The loader, ``verify`` and ``info`` open a store through one reader
#: (``readers.open_pile_reader``, whose every request is bounded in ``pilestore._groups``): each request is tried
#: through one of them, so that each entry point is shown to pass its options to the deadline (``info`` from its
#: ``--storage-option`` flags) without waiting out the deadline three times for one request.
OPEN_REQUESTS = {
    "root-metadata": ("piles.zarr/zarr.json", "info"),
    "array-metadata": ("/x/zarr.json", "verify"),
    "crc32c-table": ("/x/daskshuffle-crc32c", "loader"),
}


@pytest.mark.slow
@pytest.mark.parametrize(("only", "entry"), OPEN_REQUESTS.values(), ids=OPEN_REQUESTS.keys())
def test_opening_a_store_whose_metadata_stalls_fails_within_the_deadline(
    store: str, stalling: Any, only: str, entry: str
) -> None:
    from click.testing import CliRunner

    from daskshuffle._cli._common import cli

    options = stalling.storage_options(read_timeout=1, retries={"max_attempts": 1})
    deadline = request_deadline(options)
    assert deadline == 3, "two attempts of 1 s, and one more"
    flags = [f"--storage-option={key}={json.dumps(value)}" for key, value in options.items()]

    def info() -> None:
        result = CliRunner().invoke(cli, ["info", store, "--debug", *flags])
        assert result.exception is not None, result.output
        raise result.exception

    opens = {
        "loader": lambda: ds.PileLoader(store, batch_size=100, seed=0, storage_options=options),
        "verify": lambda: ds.verify(store, storage_options=options),
        "info": info,
    }
    stalling.fault, stalling.only = "hang", only
    started = time.perf_counter()
    with pytest.raises(ds.StorageAccessError, match=r"no answer.*within 3 s") as caught:
        opens[entry]()
    took = time.perf_counter() - started
    assert stalling.faulted > 0, "the request was made, and stalled"
    assert caught.value.reason == "unreachable" and caught.value.url == store, str(caught.value)
    # Without the deadline, s3fs's retries around botocore's try a stalled zarr.json for 20 s and 10 requests.
    assert took < 4 * deadline, took


#: The requests of opening a Parquet pile store: its sidecar, the listing of its part files, their footers.
PARQUET_OPEN_REQUESTS = {"sidecar": "piles.parquet/_daskshuffle.json", "listing": "list-type", "footers": "/part-"}


@pytest.mark.slow
@pytest.mark.parametrize("only", PARQUET_OPEN_REQUESTS.values(), ids=PARQUET_OPEN_REQUESTS.keys())
def test_opening_a_parquet_store_whose_metadata_stalls_fails_within_the_deadline(
    parquet_store: str, stalling: Any, only: str
) -> None:
    store = parquet_store
    options = stalling.storage_options(read_timeout=1, retries={"max_attempts": 1})
    stalling.fault, stalling.only, stalling.methods = "hang", only, frozenset({"GET"})
    started = time.perf_counter()
    with pytest.raises(ds.StorageAccessError, match=r"no answer.*within 3 s") as caught:
        ds.PileLoader(store, batch_size=100, seed=0, storage_options=options)
    took = time.perf_counter() - started
    assert stalling.faulted > 0, "the request was made, and stalled"
    assert caught.value.reason == "unreachable" and caught.value.url == store, str(caught.value)
    assert took < 4 * request_deadline(options), took


def _stalling_store(kind: str, local: Path, s3: Any) -> tuple[str, str]:
    """A pile store of 4,000 rows (104 kB) in 8 piles of units of 250 rows, and the part of its data requests' paths."""
    if kind == "zarr":
        source = make_zarr_source(local / "raw.zarr", 4_000, chunk_rows=250)  # 26 bytes a row
        ds.shuffle_zarr(source, s3.url("piles.zarr"), 8, seed=0, chunk_rows=250, storage_options=s3.storage_options)
        return s3.url("piles.zarr"), "/c/"
    import numpy as np
    import pandas as pd

    rows = np.arange(4_000)
    frame = pd.DataFrame({"id": rows, "x": rows.astype("f8"), "y": (rows % 7).astype("i8"), "z": rows.astype("f8")})
    frame.to_parquet(local / "raw.parquet")
    store = s3.url("piles.parquet")
    ds.shuffle_parquet(
        str(local / "raw.parquet"), store, 8, row_group_size=250, seed=0, storage_options=s3.storage_options
    )
    return store, "/part-"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["zarr", "parquet"])
def test_closing_a_loader_cancels_its_stalled_requests(
    tmp_path: Path, s3: Any, stalling: Any, configure: Any, kind: str
) -> None:
    store, data = _stalling_store(kind, tmp_path, s3)
    configure({"loader.read-ahead-nbytes": "32KiB"})  # about a third of the store: the rest waits for the consumer
    # Requests tried again every half second (a request in flight at the close would be seen again within the
    # two seconds below), within a deadline of 8 s: under load the loopback server has taken 3 s to answer the open.
    options = stalling.storage_options(read_timeout=0.5, retries={"max_attempts": 14})
    # Reads of about 16 KiB, a sixth of the store: those past the budget are fetched as the consumer comes to them.
    loader = ds.PileLoader(
        store, batch_size=100, seed=0, order=ds.orders.Piles(budget="16KiB"), storage_options=options
    )
    batches = iter(loader)
    next(batches)
    stalling.fault, stalling.only, stalling.methods = "hang", data, frozenset({"GET"})
    ended: list[BaseException | None] = []

    def consume() -> None:  # takes batches, so that the read-ahead goes on, until a read meets the stall or the close
        try:
            for _ in batches:
                pass
        except ds.DaskShuffleError as error:
            ended.append(error)
        else:
            ended.append(None)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    waited = time.perf_counter()
    while not stalling.faulted and time.perf_counter() - waited < 30:
        time.sleep(0.05)
    assert stalling.faulted, "requests of the piles ahead are stalled"
    started = time.perf_counter()
    loader.close()
    assert time.perf_counter() - started < 5, "within the deadline of 8 s: no stalled request is waited for"
    readers = [thread.name for thread in threading.enumerate() if thread.name.startswith("daskshuffle-loader")]
    assert not readers, "no reader thread stays after close"
    consumer.join(30)
    assert not consumer.is_alive() and len(ended) == 1, "the consumer's epoch ended, or its read ended in an error"
    # The consumer's read cancelled by the close is the error of a closed loader, never damage.
    assert ended[0] is None or type(ended[0]) is ds.DaskShuffleValueError, repr(ended[0])
    # Requests sent just before the close reach the proxy a few milliseconds later: counted once the count settles.
    sent = -1
    while sent != stalling.seen.get("GET", 0):
        sent = stalling.seen.get("GET", 0)
        time.sleep(0.1)
    time.sleep(2)  # four read timeouts: a request still in flight would have been tried again
    assert stalling.seen.get("GET", 0) == sent, "no request goes out after close"


#: The metadata requests of a store with generations, each with the step that tries it: its root, read by every
#: step through one bounded open (``pilestore._groups.open_group``; ``append`` reads it as ``compact`` and ``evict``
#: do, the loader as it reads any store), and a generation's own group, which ``compact`` opens through that same
#: open and ``evict`` reads again when it consolidates the root's metadata (``consolidate_group``).
GENERATION_REQUESTS = {
    "root": ("piles.zarr/zarr.json", "append"),
    "generation": ("generations/00001/zarr.json", "evict"),
}


@pytest.mark.slow
def test_a_store_with_generations_whose_metadata_stalls_fails_within_the_deadline(
    tmp_path: Path, own_store: str, s3: Any, stalling: Any
) -> None:
    """Each request stalls in turn on one store: the root's stalled append leaves the store as it was."""
    store = own_store
    more = make_zarr_source(tmp_path / "more.zarr", 1_000, chunk_rows=250, first_id=2_000)
    newest = make_zarr_source(tmp_path / "newest.zarr", 500, chunk_rows=250, first_id=3_000)
    ds.append(store, more, seed=1, storage_options=s3.storage_options)
    options = stalling.storage_options(read_timeout=1, retries={"max_attempts": 1})
    deadline = request_deadline(options)
    steps = {
        "append": lambda: ds.append(store, newest, seed=2, storage_options=options),
        "evict": lambda: ds.evict(store, keep_last=1, storage_options=options),
    }
    for only, name in GENERATION_REQUESTS.values():
        stalling.fault, stalling.only, stalling.methods = "hang", only, frozenset({"GET"})
        stalling.faulted = 0
        started = time.perf_counter()
        with pytest.raises(ds.StorageAccessError, match=r"no answer.*within 3 s") as caught:
            steps[name]()
        took = time.perf_counter() - started
        assert stalling.faulted > 0, f"{name}: the request was made, and stalled"
        assert caught.value.reason == "unreachable" and store in str(caught.value), (name, str(caught.value))
        # Without the deadline, s3fs's retries around botocore's try a stalled zarr.json for 20 s and more.
        assert took < 4 * deadline, (name, took)
    stalling.fault = None
    # evict may have listed its one generation before a stalled consolidation: the store reads before or after it.
    live = [g.n_rows for g in ds.generations(store, storage_options=s3.storage_options)]
    assert live in ([2_000, 1_000], [1_000]), live


#: The writes of a shuffle that may stall, each with the shuffle, the request it stalls and whether its pieces go to
#: a ``tmp=`` in the bucket: a Zarr store's chunk, crc32c table and lock, the probe of conditional writes, the pieces
#: of pass 1 (arrays, text) and the manifest's marks, a Parquet store's sidecar, an xarray store's template, a part of
#: a text output, a chunk of a store that replaces one on object storage, copied into its place.
WRITE_REQUESTS = {
    "chunk": ("zarr", "piles.zarr/x/c/", False),
    "crc32c-table": ("zarr", "/daskshuffle-crc32c", False),
    "lock": ("zarr", "piles.zarr.daskshuffle-lock", False),
    "probe": ("zarr", ".daskshuffle-probe-", False),
    "array-piece": ("zarr", ".daskshuffle-tmp/0/", True),
    "manifest-mark": ("zarr", ".daskshuffle-tmp/_done/", True),
    "parquet-sidecar": ("parquet", "piles.parquet/_daskshuffle.json", False),
    "xarray-template": ("xarray", "piles.zarr/x/zarr.json", False),
    "text-piece": ("text", ".lines", True),
    "text-part": ("text", ".daskshuffle-partial/", False),
    "parquet-part": ("parquet", "piles.parquet/part-", False),
    "arrow-piece": ("parquet", ".daskshuffle-tmp/0.arrow", True),
    "text-output": ("text-files", "out-1.jsonl", False),
    "text-output-replaced": ("text-overwrite", "out-1.jsonl", False),
    "decompressed-spool": ("text-gz", ".daskshuffle-spool/", False),
    "copy-into-place": ("zarr-overwrite", "piles.zarr/x/c/", False),
}


def _source(kind: str, local: Path) -> Path:
    """A small local source of a shuffle of ``kind``."""
    if kind.startswith("zarr") or kind == "xarray":
        return Path(make_zarr_source(local / "raw.zarr", 1_000, chunk_rows=250))
    if kind == "xarray-netcdf":  # a netCDF4 file, chunked
        import numpy as np
        import xarray as xr

        data = xr.Dataset({"x": (("row", "k"), np.arange(3_000.0).reshape(1_000, 3))})
        data.to_netcdf(local / "raw.nc", engine="h5netcdf", encoding={"x": {"chunksizes": (250, 3)}})
        return local / "raw.nc"
    if kind in ("parquet", "dataframe"):
        import pandas as pd

        pd.DataFrame({"id": range(1_000), "x": [float(i) for i in range(1_000)]}).to_parquet(local / "raw.parquet")
        return local / "raw.parquet"
    import gzip

    lines = "".join(f'{{"id": {i}}}\n' for i in range(1_000)).encode()
    source = local / ("raw.jsonl.gz" if kind == "text-gz" else "raw.jsonl")
    source.write_bytes(gzip.compress(lines) if kind == "text-gz" else lines)
    return source


def _shuffle(kind: str, source: str | Path, store: str, **options: Any) -> None:
    """A shuffle of ``kind`` of ``source`` (made by :func:`_source`) into ``store``."""
    if kind.startswith("xarray"):
        ds.shuffle_xarray(str(source), store, dim="row", n_piles=4, seed=0, **options)
    elif kind == "zarr-group":  # a group the user opened on their own store, with the same options
        import zarr

        group = zarr.open_group(str(source), mode="r", storage_options=options.get("storage_options"))
        ds.shuffle_zarr(group, store, 4, seed=0, **options)
    elif kind.startswith("zarr"):
        ds.shuffle_zarr(str(source), store, 4, seed=0, **options)
    elif kind == "parquet":
        ds.shuffle_parquet(str(source), store, n_piles=4, seed=0, **options)
    elif kind == "dataframe":
        import dask.dataframe as dd
        import pandas as pd

        frame = dd.from_pandas(pd.read_parquet(source), npartitions=2)
        ds.shuffle_dataframe(frame, store, n_piles=4, seed=0, **options)
    else:
        files = {"n_output_files": 2} if kind in ("text-files", "text-overwrite") else {}
        ds.shuffle_lines(str(source), store, 4, seed=0, block_memory="8KiB", **files, **options)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "only", "scratch"), WRITE_REQUESTS.values(), ids=WRITE_REQUESTS.keys())
def test_a_shuffle_whose_writes_stall_fails_within_the_deadline_and_leaves_no_valid_store(
    tmp_path: Path, s3: Any, stalling: Any, kind: str, only: str, scratch: bool
) -> None:
    store = s3.url(
        {
            "parquet": "piles.parquet",
            "text": "out.jsonl",
            "text-gz": "out.jsonl",
            "text-files": "out-{}.jsonl",
            "text-overwrite": "out-{}.jsonl",
        }.get(kind, "piles.zarr")
    )
    options = stalling.storage_options(read_timeout=1, retries={"max_attempts": 1})
    deadline = request_deadline(options)
    assert deadline == 3, "two attempts of 1 s, and one more"
    if only != ".daskshuffle-probe-":
        Location.of(store, options).conditional_writes  # noqa: B018  # probed before the faults
    stalling.fault, stalling.only, stalling.methods = "hang", only, frozenset({"PUT"})
    tmp: dict[str, Any] = {"tmp": s3.url("scratch")} if scratch else {}
    if kind in ("zarr-overwrite", "text-overwrite"):  # an output there: the new one built beside it, copied over it
        stalling.fault = None
        _shuffle(kind, _source(kind, tmp_path), store, storage_options=s3.storage_options)
        stalling.fault, tmp["overwrite"] = "hang", True
    started = time.perf_counter()
    with pytest.raises(ds.StorageAccessError, match=r"no answer.*within 3 s") as caught:
        _shuffle(kind, _source(kind, tmp_path), store, storage_options=options, **tmp)
    took = time.perf_counter() - started
    assert stalling.faulted > 0, "the request was made, and stalled"
    assert caught.value.reason == "unreachable" and s3.bucket in str(caught.value), str(caught.value)
    assert took < 4 * deadline, took
    stalling.fault = None
    if kind == "text-overwrite":  # each file the old one or the new one, whole: the same lines (the same seed)
        lines = sorted(line for path in s3.fs.glob(f"{s3.bucket}/out-*.jsonl") for line in s3.fs.cat(path).splitlines())
        assert lines == sorted(_source(kind, tmp_path).read_bytes().splitlines())
        return
    if kind.startswith("text"):
        assert not s3.fs.glob(f"{s3.bucket}/out*.jsonl"), "no output file"
        return
    with pytest.raises(ds.DaskShuffleError) as refused:
        ds.PileLoader(store, batch_size=100, seed=0, storage_options=s3.storage_options)
    assert not isinstance(refused.value, ds.StorageAccessError), str(refused.value)


#: The reads of a shuffle that may stall, each with the shuffle, the request it stalls and what is on object storage
#: (the rest on a local disk): its ``"source"`` (stalled from the first task on, after planning read the footers, for
#: ``"source-tasks"``), the ``"scratch"`` space of its pieces (``tmp=``), or a ``"store"`` at its destination. A text
#: source's blocks and a compressed one streamed whole, the Zarr and xarray sources' metadata and chunks (a Zarr
#: group's the user opened too), a netCDF4 file's chunks, the Arrow pieces of pass 1 and a dask DataFrame's spool read
#: back, and the metadata of what is at the destination.
READ_REQUESTS = {
    "text-block": ("text", "raw.jsonl", "source"),
    "compressed-text": ("text-gz", "raw.jsonl.gz", "source"),
    "xarray-metadata": ("xarray", "raw.zarr/zarr.json", "source"),
    "xarray-chunk": ("xarray", "raw.zarr/x/c/", "source"),
    "netcdf-file": ("xarray-netcdf", "raw.nc", "source-tasks"),
    "zarr-chunk": ("zarr", "raw.zarr/x/c/", "source"),
    "user-group-chunk": ("zarr-group", "raw.zarr/x/c/", "source"),
    "parquet-row-groups": ("parquet", "raw.parquet", "source-tasks"),
    "arrow-piece": ("parquet", "0.arrow", "scratch"),
    "array-piece": ("zarr", ".daskshuffle-tmp/0/", "scratch"),
    "dataframe-spool": ("dataframe", ".daskshuffle-spool/", "scratch"),
    "store-metadata": ("zarr", "piles.zarr/zarr.json", "store"),
    "zarr-source-identity": ("zarr", "delimiter=&", "source"),
    "parquet-source-identity": ("parquet", "list-type=2&prefix=&delimiter=%2F", "source"),
}


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "only", "remote"), READ_REQUESTS.values(), ids=READ_REQUESTS.keys())
def test_a_shuffle_whose_reads_stall_fails_within_the_deadline(
    tmp_path: Path, s3: Any, stalling: Any, kind: str, only: str, remote: str
) -> None:
    import dask.callbacks

    source = _source(kind, tmp_path)
    if remote.startswith("source"):
        s3.fs.put(str(source), f"{s3.bucket}/{source.name}", recursive=source.is_dir())
        source = s3.url(source.name)  # type: ignore[assignment]
    store = s3.url("piles.zarr") if remote == "store" else str(tmp_path / ("out.jsonl" if "text" in kind else "piles"))
    if remote == "store":  # something at the destination, whose metadata is read
        s3.fs.pipe_file(f"{s3.bucket}/piles.zarr/zarr.json", b"{}")
    options = stalling.storage_options(read_timeout=1, retries={"max_attempts": 1})
    deadline = request_deadline(options)
    assert deadline == 3, "two attempts of 1 s, and one more"
    if remote == "store":
        Location.of(store, options).conditional_writes  # noqa: B018  # probed before the faults
    stalling.only, stalling.methods = only, frozenset({"GET"})
    tmp = {"tmp": s3.url("scratch")} if remote == "scratch" else {}

    def stall(*_: Any) -> None:
        stalling.fault = "hang"

    started = time.perf_counter()
    stall() if remote != "source-tasks" else None
    with (
        dask.callbacks.Callback(start=stall),
        pytest.raises(ds.StorageAccessError, match=r"no answer.*within 3 s") as caught,
    ):
        _shuffle(kind, source, store, storage_options=options, overwrite=True, **tmp)
    took = time.perf_counter() - started
    assert stalling.faulted > 0, "the request was made, and stalled"
    assert caught.value.reason == "unreachable" and s3.bucket in str(caught.value), str(caught.value)
    assert took < 4 * deadline, took


@pytest.mark.slow
def test_verify_of_a_group_the_user_opened_whose_chunks_stall_fails_within_the_deadline(
    tmp_path: Path, s3: Any, stalling: Any, points: Points
) -> None:
    """``verify=True`` reads a zarr.Group the user opened (its options its own: none passed) as the shuffle did."""
    import zarr

    source = _source("zarr", tmp_path)
    s3.fs.put(str(source), f"{s3.bucket}/raw.zarr", recursive=True)
    options = stalling.storage_options(read_timeout=1, retries={"max_attempts": 1})
    group = zarr.open_group(s3.url("raw.zarr"), mode="r", storage_options=options)
    stalling.only, stalling.methods = "raw.zarr/x/c/", frozenset({"GET"})
    began: list[float] = []

    def stall(count: int) -> None:  # once the store is written: the reads of verify stall
        stalling.fault = "hang"
        began.append(time.perf_counter())

    points.arm("shuffle complete", stall)
    with pytest.raises(ds.StorageAccessError, match=r"no answer.*within 3 s") as caught:
        ds.shuffle_zarr(group, tmp_path / "piles.zarr", 4, seed=0, verify=True)
    took = time.perf_counter() - began[0]
    assert stalling.faulted > 0, "the request was made, and stalled"
    assert caught.value.reason == "unreachable" and caught.value.url == s3.url("raw.zarr/x"), str(caught.value)
    assert took < 4 * 3, took
