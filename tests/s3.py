"""A real S3 API on loopback for the object-storage tests: moto's server, started once per session.

Every request goes to 127.0.0.1. Each test that asks for the ``s3`` fixture gets
a bucket of its own and fake credentials in its environment (and in the
``storage_options`` it passes to daskshuffle), removed when it ends.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

KEY = "daskshuffle-test-key"
SECRET = "daskshuffle-test-secret"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def storage_options(endpoint: str, key: str = KEY, secret: str = SECRET) -> dict[str, Any]:
    """What fsspec (s3fs) needs to reach the loopback server: what a user passes, nothing more."""
    return {"key": key, "secret": secret, "client_kwargs": {"endpoint_url": endpoint}}


@dataclass
class S3:
    """A bucket of its own on the loopback server."""

    endpoint: str
    bucket: str
    storage_options: dict[str, Any] = field(repr=False)

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    @property
    def fs(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options)

    def put(self, local: str, name: str) -> str:
        """Upload a local file or directory; return its URL."""
        self.fs.put(local, f"{self.bucket}/{name}", recursive=True)
        return self.url(name)

    def require_auth(self, on: bool) -> None:
        """Have the server check every request's credentials (moto accepts any by default)."""
        import requests

        count = "0" if on else "inf"
        requests.post(f"{self.endpoint}/moto-api/reset-auth", data=count.encode(), timeout=10).raise_for_status()


def new_bucket(endpoint: str) -> S3:
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    s3 = S3(endpoint, bucket, storage_options(endpoint))
    s3.fs.mkdir(bucket)
    return s3
