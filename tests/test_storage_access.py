"""Storage that does not serve a request is named as such, never as a damaged store.

Against moto's S3 server on loopback, directly or through a proxy that
throttles, hangs or drops the conditions of writes (``s3.FaultyProxy``). Each
test sets its own environment: no credentials from this machine (no
``~/.aws``, no instance metadata), only those a test gives.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_zarr_source

import daskshuffle as ds
from daskshuffle.storage import _lock
from daskshuffle.storage._location import Location

pytestmark = pytest.mark.s3

#: Fail fast: one botocore attempt a request, short timeouts (s3fs still retries a few times).
FAST = {"retries": {"max_attempts": 1}, "connect_timeout": 0.5, "read_timeout": 0.3}


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


@pytest.fixture
def store(tmp_path: Path, s3: Any) -> str:
    """A Zarr pile store in the bucket."""
    source = make_zarr_source(tmp_path / "raw.zarr", 2_000, chunk_rows=250)
    ds.shuffle_zarr(source, s3.url("piles.zarr"), 4, seed=0, storage_options=s3.storage_options)
    return s3.url("piles.zarr")


@pytest.fixture
def proxy(s3: Any) -> Iterator[Any]:
    from s3 import FaultyProxy

    proxy = FaultyProxy(s3.endpoint, hang_seconds=1.5)
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
def test_a_parquet_store_that_is_throttled_is_not_called_damaged(tmp_path: Path, s3: Any, proxy: Any) -> None:
    import pandas as pd

    frame = pd.DataFrame({"id": range(3_000), "x": [float(i) for i in range(3_000)]})
    frame.to_parquet(tmp_path / "raw.parquet")
    store = s3.url("piles.parquet")
    ds.shuffle_parquet(str(tmp_path / "raw.parquet"), store, n_piles=3, seed=0, storage_options=s3.storage_options)
    loader = ds.PileLoader(store, batch_size=100, seed=0, prefetch="0B", storage_options=proxy.storage_options(**FAST))
    proxy.fault, proxy.only = "throttle", "/part-"
    with pytest.raises(ds.StorageAccessError, match="throttled") as caught:
        next(iter(loader))
    loader.close()
    assert not isinstance(caught.value, ds.CorruptPileStoreError) and "part-" in str(caught.value)


def test_a_missing_chunk_is_still_damage(store: str, s3: Any) -> None:
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


@pytest.fixture
def bare_cluster(s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A cluster whose one worker process has no credentials, and this process with them (as a notebook's).

    Both find the server through ``AWS_ENDPOINT_URL``; the worker started while
    the credentials were out of the environment, which it keeps.
    """
    from distributed import LocalCluster
    from s3 import KEY, SECRET

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    _no_credentials(monkeypatch, tmp_path)
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
    ) as cluster:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        yield cluster.scheduler_address


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

    from daskshuffle._cli import cli

    source = s3.put(make_zarr_source(tmp_path / "raw.zarr", 1_000, chunk_rows=100), "raw.zarr")
    dst = s3.url("piles.zarr")
    ds.shuffle_zarr(source, dst, 2, seed=0, storage_options=s3.storage_options)
    assert CliRunner().invoke(cli, ["info", dst]).exit_code == 0, "this process reaches the store"
    verified = CliRunner().invoke(cli, ["verify", dst, "--scheduler", bare_cluster])
    assert verified.exit_code == 1, verified.output
    lines = [line for line in verified.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in verified.output, verified.output
    assert re.search(WORKERS_LACK, lines[0]) and "AWS_ACCESS_KEY_ID" in lines[0], lines[0]
