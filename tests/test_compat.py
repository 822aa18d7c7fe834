"""The adapters to other libraries' internals: pinned to the versions they were checked against, and working on real objects."""

from __future__ import annotations

import importlib.metadata
import time
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from daskshuffle._compat import _distributed, _fsspec


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def test_major_minor() -> None:
    assert _major_minor("2026.8.0") == "2026.8"
    assert _major_minor("2.13.0+cpu") == "2.13"
    assert _major_minor("2.1.3") != _major_minor("2.13.0")


def _unchecked(adapter: ModuleType, library: str, installed: str) -> str | None:
    """What to say of ``installed`` if ``adapter`` was not checked against its release, else ``None``."""
    checked = adapter.CHECKED[library]
    if _major_minor(installed) in checked:
        return None
    return (
        f"{adapter.__name__} was checked against {library} {', '.join(checked)}; {installed} is installed. "
        f"Check the private API its docstring names still behaves as it says (the tests below try it), then add "
        f"{_major_minor(installed)} to its CHECKED."
    )


def test_an_unchecked_release_is_named_with_what_to_do() -> None:
    assert _unchecked(_distributed, "distributed", "2026.8.1") is None
    said = _unchecked(_distributed, "distributed", "2099.1.0")
    assert said is not None and "2099.1.0 is installed" in said and "add 2099.1 to its CHECKED" in said


@pytest.mark.parametrize(
    ("adapter", "library"),
    [
        (_distributed, "distributed"),
        (_fsspec, "fsspec"),
    ],
)
@pytest.mark.filterwarnings("always::UserWarning")
def test_the_installed_version_is_one_the_adapter_was_checked_against(adapter: ModuleType, library: str) -> None:
    """A warning, not a failure: a release pyproject allows must not fail CI; the adapter's own tests say if it broke."""
    try:
        installed = importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{library} is not installed")
    said = _unchecked(adapter, library, installed)
    if said is not None:
        warnings.warn(said, UserWarning, stacklevel=1)


def test_the_adapters_import_nothing_at_import_time() -> None:
    for adapter in (_distributed, _fsspec):
        assert not {name for name in vars(adapter) if name in {"dask", "distributed", "fsspec", "torch", "pandas"}}


# -- distributed -------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_client() -> Iterator[Any]:
    """A real LocalCluster of one worker thread in this process, so that the test reaches its scheduler and worker."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


@pytest.mark.cluster
def test_running_handlers_counts_a_schedulers_handlers_by_name(local_client: Any) -> None:
    assert local_client.run_on_scheduler(_distributed.running_handlers, op="register-client") >= 1
    assert local_client.run_on_scheduler(_distributed.running_handlers, op="no-such-handler") == 0


@pytest.mark.cluster
def test_running_handlers_sees_a_progress_feed_until_it_ends(local_client: Any) -> None:
    from distributed.diagnostics.progressbar import TextProgressBar

    future = local_client.submit(time.sleep, 1.0, key="compat-feed")
    before = local_client.run_on_scheduler(_distributed.running_handlers, op="feed")
    bar = TextProgressBar([future], scheduler=local_client.scheduler.address, complete=False, start=False)
    try:
        local_client.loop.add_callback(bar.listen)
        deadline = time.monotonic() + 10
        while local_client.run_on_scheduler(_distributed.running_handlers, op="feed") <= before:
            assert time.monotonic() < deadline, "the bar's feed handler never showed"
            time.sleep(0.02)
    finally:
        future.result()
    while local_client.run_on_scheduler(_distributed.running_handlers, op="feed") > before:
        assert time.monotonic() < deadline + 10, "the bar's feed handler never ended"
        time.sleep(0.02)


@pytest.mark.cluster
def test_running_task_keys_lists_what_a_worker_executes(local_client: Any) -> None:
    future = local_client.submit(time.sleep, 1.0, key="compat-sleep")
    try:
        deadline = time.monotonic() + 10
        while not any("compat-sleep" in keys for keys in local_client.run(_distributed.running_task_keys).values()):
            assert time.monotonic() < deadline, "the worker never reported its running task"
            time.sleep(0.02)
    finally:
        future.result()
    assert not any("compat-sleep" in keys for keys in local_client.run(_distributed.running_task_keys).values())


def _bars(widget: Any) -> list[Any]:
    """The ``FloatProgress`` widgets inside a box of boxes."""
    from ipywidgets import Box, FloatProgress

    if isinstance(widget, FloatProgress):
        return [widget]
    if isinstance(widget, Box):
        return [bar for child in widget.children for bar in _bars(child)]
    return []


@pytest.mark.cluster
def test_a_progress_widget_drawn_from_the_client_loop_moves_while_the_calling_thread_is_busy(local_client: Any) -> None:
    pytest.importorskip("ipywidgets")
    from distributed import progress

    future = local_client.submit(time.sleep, 1.0, key="compat-progress")
    bar = progress(future, notebook=True, scheduler=local_client.scheduler.address)
    widget, drawn = _distributed.draw_from_client_loop(bar, local_client)
    drawn_while_running = False
    while not future.done():  # busy here, as a cell that waits: no event loop runs in this thread
        drawn_while_running = drawn_while_running or bool(_bars(widget))
        time.sleep(0.01)
    assert drawn_while_running, "the bar was drawn before its task finished"
    assert drawn.result(timeout=10) is None
    assert [bar.value for bar in _bars(widget)] == [1.0]
    assert "Finished" in widget.children[0].value


# -- fsspec ------------------------------------------------------------------------


def test_cached_filesystems_are_those_fsspec_keeps_and_no_others() -> None:
    import fsspec
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.implementations.memory import MemoryFileSystem

    memory, local = fsspec.filesystem("memory"), fsspec.filesystem("file")
    apart = MemoryFileSystem(skip_instance_cache=True)
    everything = _fsspec.cached_filesystems(fsspec.AbstractFileSystem)
    assert any(found is memory for found in everything) and any(found is local for found in everything)
    assert not any(found is apart for found in everything)
    assert all(isinstance(found, MemoryFileSystem) for found in _fsspec.cached_filesystems(MemoryFileSystem))
    assert not any(found is memory for found in _fsspec.cached_filesystems(LocalFileSystem))


def test_a_forked_process_keeps_the_filesystems_it_inherited() -> None:
    """fsspec empties its caches in the child; the child still holds what the parent had, unused."""
    import multiprocessing

    import fsspec

    from daskshuffle.storage import _place

    memory = fsspec.filesystem("memory")
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        kept, cached = pool.apply(_held_in_child, (id(memory),))
    assert kept and not cached
    assert not _place._forking  # the parent lets go of them


def _held_in_child(parent_id: int) -> tuple[bool, bool]:
    import fsspec

    from daskshuffle.storage import _place

    kept = any(id(found) == parent_id for found in _place._inherited)
    return kept, any(id(found) == parent_id for found in _fsspec.cached_filesystems(fsspec.AbstractFileSystem))
