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


class FaultyProxy:
    """An HTTP proxy on 127.0.0.1 in front of the loopback server that can fail requests as real S3 does.

    ``fault`` (set at any time) decides what the requests matching ``only``
    (a substring of the path and query; every request if empty) and ``methods``
    (every method if empty) get:

    - ``None``: forwarded, and the server's answer returned;
    - ``"throttle"``: ``503 SlowDown``, as S3 answers a client over its request rate;
    - ``"deny"``: ``403 AccessDenied``, as S3 answers credentials without the permission;
    - ``"hang"``: no answer for ``hang_seconds``, then the connection closed (a client times out first);
    - ``"unconditional"``: forwarded without ``If-None-Match`` and ``If-Match``, as by a server that ignores them.

    ``seen`` counts the requests that reached the proxy, by method; ``faulted`` those that met the fault.
    """

    def __init__(self, upstream: str, hang_seconds: float = 3.0) -> None:
        import threading
        from http.server import ThreadingHTTPServer

        self.upstream = upstream.removeprefix("http://")
        self.fault: str | None = None
        self.only = ""
        self.methods: frozenset[str] = frozenset()
        self.faulted = 0
        self.hang_seconds = hang_seconds
        self.seen: dict[str, int] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="faulty-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def storage_options(self, **more: Any) -> dict[str, Any]:
        """What reaches the server through this proxy; ``more`` is added to botocore's ``config_kwargs``."""
        options = storage_options(self.endpoint)
        if more:
            options["config_kwargs"] = more
        return options

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


_THROTTLED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
)
_ERRORS = {"throttle": (503, _THROTTLED), "deny": (403, _DENIED)}


def _handler(proxy: FaultyProxy) -> Any:
    import http.client
    import time
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                parts = []
                while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b""):
                    pass
                return b"".join(parts)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _answer(self) -> None:
            body = self._body()
            proxy.seen[self.command] = proxy.seen.get(self.command, 0) + 1
            matches = proxy.only in self.path and (not proxy.methods or self.command in proxy.methods)
            fault = proxy.fault if matches else None
            if fault is not None and fault != "unconditional":
                proxy.faulted += 1
            if fault == "hang":
                time.sleep(proxy.hang_seconds)
                self.close_connection = True
                return
            if fault in _ERRORS:
                status, error = _ERRORS[fault]
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(error)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(error)
                return
            dropped = {"transfer-encoding", "content-length"}
            if fault == "unconditional":
                dropped |= {"if-none-match", "if-match"}
            headers = {name: value for name, value in self.headers.items() if name.lower() not in dropped}
            headers["Content-Length"] = str(len(body))
            connection = http.client.HTTPConnection(proxy.upstream, timeout=30)
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
            finally:
                connection.close()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(name, value)
            length = answer.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

    return Handler
