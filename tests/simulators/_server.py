"""A threaded HTTP server on 127.0.0.1 with a random port, started and stopped around tests.

Every simulator is a ``BaseHTTPRequestHandler`` subclass plus a state object the
tests script; this module only runs it. Threaded because the pipeline sends
concurrent requests and a serial server would hide concurrency bugs.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    #: The stdlib default backlog of 5 refuses bursts of concurrent connects.
    request_queue_size = 128
    allow_reuse_address = True
    #: The simulator's scripted state, reachable from handlers as ``self.server.state``.
    state: Any


class Simulator:
    """Run ``handler`` on 127.0.0.1:<free port> in a background thread.

    Use as a context manager (or call ``start``/``stop``); ``url`` is the base URL
    without a trailing slash.
    """

    def __init__(self, handler: type[BaseHTTPRequestHandler], state: Any = None) -> None:
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.state = state
        # A short shutdown poll: the default 0.5 s adds half a second to every teardown.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def state(self) -> Any:
        return self._server.state

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Simulator:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class QuietHandler(BaseHTTPRequestHandler):
    """Base handler: no access log on stderr, HTTP/1.1, JSON helpers."""

    protocol_version = "HTTP/1.1"
    #: TCP_NODELAY, as production HTTP servers set it. Without it a kept-alive
    #: connection stalls ~40 ms per response: the body's write waits for the ACK
    #: of the headers' write, which the client delays (Nagle meets delayed ACK).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def read_json(self) -> Any:
        return json.loads(self.read_body() or b"null")

    def send(
        self,
        status: int,
        body: bytes | str = b"",
        *,
        content_type: str = "text/plain; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> None:
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.send(
            status,
            json.dumps(payload),
            content_type="application/json",
            headers=headers,
        )
