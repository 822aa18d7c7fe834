"""The command line's LocalCluster: it listens on loopback only, and its worker processes stay quiet."""

from __future__ import annotations

import logging
import socket

import pytest

from daskshuffle._cli._common import session


def _listening_hosts(cluster: object) -> set[str]:
    """The addresses the scheduler's dashboard (HTTP) server is bound to."""
    server = cluster.scheduler.http_server  # type: ignore[attr-defined]
    return {sock.getsockname()[0] for sock in server._sockets.values()}


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("workers", [None, 1])
def test_local_cluster_listens_on_loopback_only(workers: int | None) -> None:
    from distributed import Client

    with session(scheduler=None, workers=workers, debug=False):
        client = Client.current()
        cluster = client.cluster
        assert _listening_hosts(cluster) == {"127.0.0.1"}
        address = cluster.scheduler.address
        if workers is not None:  # worker processes reach the scheduler over TCP, on loopback
            assert "127.0.0.1" in cluster.dashboard_link
            assert address.startswith("tcp://127.0.0.1:")
            host, port = address[len("tcp://") :].rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5):
                pass
        for worker in client.scheduler_info()["workers"]:
            assert worker.startswith(("tcp://127.0.0.1:", "inproc://"))


def _log_an_error() -> None:
    logging.getLogger("distributed.worker").error("a worker's own error log")


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("debug", [False, True])
def test_worker_processes_log_on_stderr_only_under_debug(debug: bool, capfd: pytest.CaptureFixture[str]) -> None:
    from distributed import Client

    with session(scheduler=None, workers=1, debug=debug):
        Client.current().run(_log_an_error)
    shown = "a worker's own error log" in capfd.readouterr().err
    assert shown == debug, "a worker process's logs reach stderr under --debug alone"
