"""Connection sharing (``transport.shared_connections``) against a real HTTP/1.1 server.

The server below is a raw socket server on 127.0.0.1 so each test can script
what happens to a kept-alive connection: it counts connections and requests,
and it can drop a connection after reading a request without answering, which
is what a server whose keep-alive timeout fires just as a request arrives does
(RFC 9112 §9.8: a client must be ready to retry a request on a new connection
when the server closes an idle one).
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import select
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from pytest_citations.transport import (
    LiveRecorder,
    LiveTransport,
    PooledTransport,
    client_for,
    shared_connections,
)

BODY = b"<html><body><p>hello</p></body></html>"


@dataclass
class KeepAliveServer:
    """Answers each request with keep-alive; ``drop`` says which requests go unanswered.

    ``drop(connection_index, request_index_on_connection)`` → True closes the
    connection after reading that request, with no response.
    """

    drop: object = None
    #: Seconds to wait before answering a request whose path starts with /slow.
    slow: float = 0.0
    connections: int = 0
    closed_by_client: int = 0
    requests: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            index = self.connections
            self.connections += 1
            threading.Thread(target=self._serve, args=(connection, index), daemon=True).start()

    def _serve(self, connection: socket.socket, index: int) -> None:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""
        served = 0
        with connection:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = connection.recv(65536)
                    if not chunk:
                        self.closed_by_client += 1
                        return
                    buffer += chunk
                _head, _, buffer = buffer.partition(b"\r\n\r\n")
                self.requests.append((index, served))
                if callable(self.drop) and self.drop(index, served):
                    return  # closed without a response
                if _head.split(b" ")[1:2] and _head.split(b" ")[1].startswith(b"/slow"):
                    readable, _, _ = select.select([connection], [], [], self.slow)
                    if readable and not connection.recv(65536):
                        self.closed_by_client += 1  # the client gave up waiting
                        return
                served += 1
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                    + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
                    + BODY
                )

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    instance = KeepAliveServer()
    yield instance
    instance.close()


async def _get_twice(url: str, *, shared: bool) -> list[int]:
    async def one() -> int:
        transport = LiveTransport(allow_private_hosts=True)
        async with client_for(transport, timeout=5) as client:
            response = await client.get(url)
            await transport.aclose()
            return response.status_code

    if not shared:
        return [await one(), await one()]
    async with shared_connections():
        return [await one(), await one()]


def test_units_inside_one_block_share_a_connection(server: KeepAliveServer) -> None:
    assert asyncio.run(_get_twice(server.url + "/a", shared=True)) == [200, 200]
    assert server.connections == 1
    assert server.requests == [(0, 0), (0, 1)]


def test_units_outside_a_block_each_open_their_own(server: KeepAliveServer) -> None:
    assert asyncio.run(_get_twice(server.url + "/a", shared=False)) == [200, 200]
    assert server.connections == 2


def test_nested_blocks_reuse_the_outer_pool(server: KeepAliveServer) -> None:
    async def scenario() -> None:
        async with shared_connections():
            await _get_twice(server.url + "/a", shared=True)  # opens a nested block
            await _get_twice(server.url + "/b", shared=True)

    asyncio.run(scenario())
    assert server.connections == 1
    assert len(server.requests) == 4


def test_a_request_the_server_drops_on_a_reused_connection_is_sent_again(
    server: KeepAliveServer,
) -> None:
    # The second request on the first connection is read and left unanswered.
    server.drop = lambda connection, request: (connection, request) == (0, 1)
    assert asyncio.run(_get_twice(server.url + "/a", shared=True)) == [200, 200]
    assert server.requests == [(0, 0), (0, 1), (1, 0)]  # exactly one more try, on a new connection


def test_a_request_dropped_on_a_fresh_connection_is_not_retried(server: KeepAliveServer) -> None:
    server.drop = lambda connection, request: True

    async def scenario() -> None:
        async with shared_connections():
            transport = LiveTransport(allow_private_hosts=True)
            async with client_for(transport, timeout=5) as client:
                await client.get(server.url + "/a")

    with pytest.raises(httpx.RemoteProtocolError):
        asyncio.run(scenario())
    assert server.requests == [(0, 0)]  # a real failure: no silent second request


def test_a_post_dropped_on_a_reused_connection_is_not_sent_again(server: KeepAliveServer) -> None:
    # The judge's POST is not idempotent: the judge's own bounded retries decide.
    server.drop = lambda connection, request: (connection, request) == (0, 1)

    async def scenario() -> None:
        async with shared_connections():
            transport = LiveTransport(allow_private_hosts=True)
            async with client_for(transport, timeout=5) as client:
                assert (await client.post(server.url + "/v1", content=b"{}")).status_code == 200
                await client.post(server.url + "/v1", content=b"{}")

    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        asyncio.run(scenario())
    assert server.requests == [(0, 0), (0, 1)]


def test_concurrent_requests_retry_only_what_was_dropped_on_a_reused_connection(
    server: KeepAliveServer,
) -> None:
    # Connection 0 serves a first request, then drops its second one; every later
    # connection drops everything. Only the request that went out on the reused
    # connection 0 may be tried again, once; those that failed on fresh
    # connections are final, whatever the pool held when they started.
    server.drop = lambda connection, request: connection >= 1 or request >= 1

    async def scenario() -> list[object]:
        async with shared_connections():
            transport = LiveTransport(allow_private_hosts=True)
            async with client_for(transport, timeout=5) as client:
                await client.get(server.url + "/warm")
                return await asyncio.gather(
                    client.get(server.url + "/a"),
                    client.get(server.url + "/b"),
                    return_exceptions=True,
                )

    outcomes = asyncio.run(scenario())
    assert all(isinstance(outcome, httpx.TransportError) for outcome in outcomes)
    assert server.requests[:1] == [(0, 0)]
    # the warm-up, the two requests, and one retry in all: the reused connection's
    assert len(server.requests) == 1 + 2 + 1


def test_a_thread_with_its_own_loop_does_not_borrow_the_blocks_pool(
    server: KeepAliveServer,
) -> None:
    from pytest_citations._threads import run_blocking

    def in_another_loop() -> int:
        async def one() -> int:
            transport = LiveTransport(allow_private_hosts=True)
            async with client_for(transport, timeout=5) as client:
                status = (await client.get(server.url + "/other-loop")).status_code
            await transport.aclose()
            return status

        return asyncio.run(one())

    async def scenario() -> list[int]:
        async with shared_connections():
            first = await _get_twice(server.url + "/a", shared=True)
            # run_blocking copies the context (and so the block's pool) into the thread
            return [*first, await run_blocking(in_another_loop)]

    assert asyncio.run(scenario()) == [200, 200, 200]
    assert server.connections == 2  # the block's connection, and the thread's own


def test_a_block_closes_its_pool(server: KeepAliveServer) -> None:
    async def scenario() -> None:
        async with shared_connections():
            transport = PooledTransport()
            async with httpx.AsyncClient(transport=transport) as client:
                assert (await client.get(server.url + "/a")).status_code == 200
            assert server.closed_by_client == 0  # kept alive for the block's next unit

    asyncio.run(scenario())
    waited = threading.Event()
    for _ in range(100):  # the server thread sees the EOF shortly after
        if server.closed_by_client:
            break
        waited.wait(0.01)
    assert server.closed_by_client == 1


def test_a_batch_fetches_every_page_over_one_kept_alive_connection(
    server: KeepAliveServer, tmp_path: Path
) -> None:
    from fakes import FakeEmbedder

    from pytest_citations.batch import BatchOptions, run_batch
    from pytest_citations.pipeline import Verifier
    from pytest_citations.settings import Settings

    source = tmp_path / "claims.jsonl"
    source.write_text(
        "\n".join(
            json.dumps({"id": str(i), "claim": f"Claim {i}.", "urls": [f"{server.url}/page/{i}"]})
            for i in range(4)
        ),
        encoding="utf-8",
    )
    settings = Settings(fetcher="direct", allow_private_hosts=True)
    verifier = Verifier(
        settings, embedder=FakeEmbedder(), recorder=LiveRecorder(allow_private_hosts=True)
    )
    options = BatchOptions(input=source, out=tmp_path / "out.csv", concurrency=1)
    result = asyncio.run(run_batch(options, verifier, stderr=io.StringIO()))
    assert [row.verdict.reason for row in result.rows if row.verdict] == ["thin_page"] * 4
    assert (server.connections, len(server.requests)) == (1, 4)


def test_a_request_after_its_block_ended_does_not_use_the_closed_pool(
    server: KeepAliveServer,
) -> None:
    async def scenario() -> tuple[int, bool]:
        async with shared_connections():
            inside = contextvars.copy_context()  # what a task started in the block keeps
        transport = PooledTransport()

        async def late() -> tuple[int, bool]:
            async with httpx.AsyncClient(transport=transport) as client:
                status = (await client.get(server.url + "/late")).status_code
                return status, transport._own is not None

        return await asyncio.get_running_loop().create_task(late(), context=inside)

    # A closed httpcore pool would still open connections, and nothing would close them.
    assert asyncio.run(scenario()) == (200, True)  # sent through a pool of its own


def test_when_one_citation_fails_the_others_are_cancelled_before_the_error_returns() -> None:
    from pytest_citations.pipeline import _all_or_none

    events: list[str] = []

    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("one citation failed")

    async def slow() -> None:
        try:
            await asyncio.sleep(5)
        finally:
            events.append("slow citation stopped")

    async def scenario() -> None:
        with pytest.raises(ValueError, match="one citation failed"):
            await _all_or_none([slow(), fails()])
        # plain gather would return the error with the slow citation still running
        events.append("error returned")

    asyncio.run(scenario())
    assert events == ["slow citation stopped", "error returned"]
