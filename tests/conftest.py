"""Shared fixtures: real Zarr stores on disk and one real LocalCluster per session."""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import settings

# Property tests check properties, not speed: a busy CI machine must not fail them on time.
settings.register_profile("daskshuffle", deadline=None, print_blob=True)
# Fewer examples for the quick loop (`make test-fast` passes --hypothesis-profile=fast); CI runs all.
settings.register_profile("fast", settings.get_profile("daskshuffle"), max_examples=20)
settings.load_profile("daskshuffle")

#: The ``configure`` fixture: sets ``daskshuffle.config`` values until the test ends.
Configure = Callable[[Mapping[str, Any]], None]


def make_zarr_source(
    path: Path | str,
    n_rows: int,
    *,
    chunk_rows: int = 100,
    width: int = 4,
    first_id: int = 0,
    zarr_format: int = 3,
) -> str:
    """A group with ``x`` (n_rows, width) float32, ``y`` (n_rows,) int16 and ``id`` (n_rows,) int64.

    ``x[:, 0]`` and ``y`` are functions of ``id`` so that alignment can be checked.
    """
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    ids = np.arange(first_id, first_id + n_rows, dtype=np.int64)
    x = np.random.default_rng(first_id).standard_normal((n_rows, width)).astype(np.float32)
    x[:, 0] = ids

    def dims(*names: str, **attributes: object) -> dict:
        # xarray's dimension names: v3 metadata, or the _ARRAY_DIMENSIONS attribute in v2
        if zarr_format == 3:
            return {"dimension_names": names, "attributes": attributes}
        return {"attributes": {**attributes, "_ARRAY_DIMENSIONS": list(names)}}

    chunk_rows = max(chunk_rows, 1)
    group.create_array("x", shape=x.shape, chunks=(chunk_rows, width), dtype=x.dtype, **dims("row", "feature"))[...] = x
    y = group.create_array("y", shape=(n_rows,), chunks=(chunk_rows,), dtype=np.int16, **dims("row", units="label"))
    y[...] = (ids % 7).astype(np.int16)
    group.create_array("id", shape=(n_rows,), chunks=(chunk_rows,), dtype=np.int64, **dims("row"))[...] = ids
    group.attrs["title"] = "example"
    return str(path)


def consume(loader: Any, n: int) -> list[np.ndarray]:
    """The ids of the next ``n`` batches of a ``PileLoader``, crossing into later epochs as a training loop does."""
    out: list[np.ndarray] = []
    while len(out) < n:
        for batch in loader:
            out.append(batch["id"])
            if len(out) == n:
                break
    return out


def interruptible() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: Ctrl-C's default action.

    A shell that runs the suite in the background ignores SIGINT, the child
    inherits that, and Python then installs no KeyboardInterrupt handler.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)


def tree_digest(path: Path | str) -> str:
    """A digest of every file's name, bytes and modification time below ``path``."""
    digest = hashlib.sha256()
    for file in sorted(Path(path).rglob("*")):
        if file.is_file():
            digest.update(str(file.relative_to(path)).encode())
            digest.update(file.read_bytes())
            digest.update(str(file.stat().st_mtime_ns).encode())
    return digest.hexdigest()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test on the shared LocalCluster is a cluster test, whether or not it says so.
    for item in items:
        if "cluster_client" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


# -- slow markers that tell the truth ---------------------------------------------

#: Tests whose call took longer than ``unmarked_slow_seconds`` without a ``slow`` marker: (node id, seconds).
_UNMARKED_SLOW: list[tuple[str, float]] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "unmarked_slow_seconds",
        "a test whose call takes longer than this without a slow marker is named after the run",
        default="3",
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "slow" not in report.keywords and report.nodeid.startswith("tests/"):
        _UNMARKED_SLOW.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Name the unmarked tests that took long: a warning, not a failure (a shared machine slows quick tests too)."""
    limit = float(config.getini("unmarked_slow_seconds"))
    slow = sorted((seconds, nodeid) for nodeid, seconds in _UNMARKED_SLOW if seconds > limit)
    if not slow:
        return
    terminalreporter.section(f"tests over {limit:g} s without @pytest.mark.slow", sep="=", yellow=True)
    for seconds, nodeid in reversed(slow):
        terminalreporter.line(f"{seconds:7.2f}s {nodeid}")
    terminalreporter.line("Mark them slow (or make them quick); `make test-fast` leaves slow tests out.")


@pytest.fixture
def configure() -> Iterator[Configure]:
    """Sets ``daskshuffle.config`` values for the rest of the test (as ``monkeypatch`` sets attributes), undone after it."""
    import daskshuffle

    made = []
    yield lambda values: made.append(daskshuffle.config.set(dict(values)))
    for done in reversed(made):
        done.__exit__(None, None, None)


@pytest.fixture
def source(tmp_path: Path) -> str:
    return make_zarr_source(tmp_path / "raw.zarr", 1_000, chunk_rows=64)


@pytest.fixture(scope="session")
def cluster_client() -> Iterator[object]:
    """A real two-worker LocalCluster on loopback, shared by the tests that need one."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on loopback, started once for the session's S3 tests."""
    pytest.importorskip("moto.server", reason="the S3 tests need moto[server] (the dev extra)")
    pytest.importorskip("s3fs", reason="the S3 tests need s3fs (the s3 extra)")
    from s3 import moto_server

    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A bucket of its own on the loopback S3 server, with fake credentials in this test's environment."""
    from s3 import KEY, REGION, SECRET, new_bucket

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    yield new_bucket(s3_endpoint)
    # fsspec keeps every filesystem made, each with its botocore client (tens of thousands of objects): one per
    # endpoint and options, and a test makes its own. Kept, they made a full garbage collection late in a run
    # take seconds, which stopped the loopback server and the client mid-request, past a stall test's deadline.
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def memory_store(tmp_path: Path) -> str:
    """A pile store of 20,000 rows in 40 piles (also at ``tmp_path / "piles.zarr"``), copied into fsspec's memory filesystem."""
    import fsspec

    import daskshuffle as ds

    source = tmp_path / "raw.zarr"
    group = zarr.open_group(source, mode="w")
    group.create_array("x", data=np.arange(20_000 * 4, dtype="f4").reshape(20_000, 4), chunks=(1_000, 4))
    group.create_array("id", data=np.arange(20_000), chunks=(1_000,))
    ds.shuffle_zarr(str(source), str(tmp_path / "piles.zarr"), n_piles=40, seed=3)
    url = f"memory://store-{tmp_path.name}/piles.zarr"
    fsspec.filesystem("memory").put(str(tmp_path / "piles.zarr"), url, recursive=True)
    return url


class Points:
    """The library's fault points (:mod:`daskshuffle.storage._crash`) armed for one test, disarmed when it ends."""

    def __init__(self) -> None:
        self._armed: dict[str, Any] = {}

    def arm(self, name: str, action: Callable[[int], object] = lambda count: None) -> list[int]:
        """Call ``action(count)`` each time this process reaches ``name``, in place of any earlier arming of it."""
        from daskshuffle.storage._crash import armed

        self.disarm(name)
        self._armed[name] = armed(name, action)
        return self._armed[name].__enter__()

    def disarm(self, name: str) -> None:
        manager = self._armed.pop(name, None)
        if manager is not None:
            manager.__exit__(None, None, None)


@pytest.fixture
def points() -> Iterator[Points]:
    """Arm the library's fault points for the test: ``points.arm("merge", raise_at(3))``."""
    armed = Points()
    try:
        yield armed
    finally:
        for name in list(armed._armed):
            armed.disarm(name)


def raise_at(count: int | None = None, error: type[BaseException] = KeyboardInterrupt) -> Callable[[int], None]:
    """A point's action that raises ``error`` when it is reached the ``count``-th time (every time if ``None``)."""

    def action(reached: int) -> None:
        if count is None or reached == count:
            raise error(f"a fault at the point's {reached}th reach")

    return action
