"""The HTTP layer every stage shares: one live transport, and the recorder seam.

Each unit of network work (one page fetch, one judge call, one Storage API read)
runs inside ``recorder.session(kind, key)``, which yields the httpx transport that
unit must use. The default :class:`LiveRecorder` yields the live transport; the
pytest plugin and the batch command pass a cassette recorder
(:mod:`pytest_citations.cassettes`) that replays or records one cassette per unit.

Two checks live here, at the bottom of the stack, because only here do we know a
request is really leaving the machine (a replay never reaches this layer):

* a missing credential raises :class:`MissingCredentialError` naming the
  variable — so replays need no keys;
* direct page fetches refuse loopback, private, link-local and metadata
  addresses after DNS resolution, on every redirect hop (SSRF protection).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import ipaddress
import logging
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, Protocol

import httpx

from pytest_citations.errors import MissingCredentialError

UnitKind = Literal["page", "judge", "storage"]

#: Identifies us to sites and APIs; some origins block the default httpx agent.
USER_AGENT = "pytest-citations/0.1 (+https://pypi.org/project/pytest-citations/)"

#: Request extension a client sets when a credential is absent:
#: ``(variable, purpose)``. The live transport refuses such a request.
MISSING_CREDENTIAL = "pytest_citations.missing_credential"
#: Request extension set on direct page fetches: resolve the host and refuse
#: non-public addresses before connecting.
GUARD_ADDRESS = "pytest_citations.guard_address"


#: ``token=<value>`` in a query string, as in Crawlbase's ``storage_url`` header.
_TOKEN_IN_QUERY = re.compile(r"(token=)[^&\s'\"<>]+")
#: Loggers that write raw wire data: httpcore's DEBUG trace prints response
#: headers, and Crawlbase's ``storage_url`` header holds the token. (A logger's
#: filter does not apply to its children's records, hence the full names.)
_WIRE_LOGGERS = (
    "httpx",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.connection",
    "httpcore.connection_pool",
    "vcr.cassette",
    "vcr.stubs",
)


class _RedactTokens(logging.Filter):
    """Masks ``token=…`` query values in a log record before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "token=" in message:
            record.msg = _TOKEN_IN_QUERY.sub(r"\1***", message)
            record.args = ()
        return True


def _install_log_redaction() -> None:
    for name in _WIRE_LOGGERS:
        target = logging.getLogger(name)
        if not any(isinstance(f, _RedactTokens) for f in target.filters):
            target.addFilter(_RedactTokens())


_install_log_redaction()


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One verifying TLS context per process.

    Building one loads the CA bundle (~60 ms of CPU); a context per unit of
    network work would cap a live run near 15 units per second.
    """
    return httpx.create_ssl_context()


class BlockedAddressError(httpx.ConnectError):
    """The host resolves to an address direct mode may not reach."""


class ResolutionError(httpx.ConnectError):
    """The host name does not resolve (DNS failure)."""


def is_public_address(address: str) -> bool:
    """False for loopback, private, link-local, multicast, reserved and metadata addresses.

    ``is_global`` already excludes RFC 1918, 127/8, 169.254/16 (which holds the
    cloud metadata endpoint 169.254.169.254), ::1, fc00::/7 and fe80::/10; an
    IPv4-mapped IPv6 address is judged by the IPv4 address it carries.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def _resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ResolutionError(f"cannot resolve host {host!r}: {error.strerror}") from None
    except UnicodeError:
        raise ResolutionError(f"cannot resolve host {host!r}: not a valid host name") from None
    return sorted({str(info[4][0]) for info in infos})


# -- connection sharing ---------------------------------------------------------------


class _PoolSlot:
    """The pool of one :func:`shared_connections` block, created by its first live request.

    A replay never sends a request, so it never pays for building a pool. The
    slot belongs to the event loop that opened the block (a pool's connections
    cannot move between loops) and refuses to build a pool once the block ended.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pool: httpx.AsyncHTTPTransport | None = None
        self.closed = False

    def usable(self) -> bool:
        """Open, and on the loop running now (a thread's own loop gets its own pool)."""
        if self.closed:
            return False
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def get(self) -> httpx.AsyncHTTPTransport:
        if self.pool is None:
            self.pool = new_connection_pool()
        return self.pool


#: The slot of the innermost :func:`shared_connections` block, if any.
_SHARED_POOL: contextvars.ContextVar[_PoolSlot | None] = contextvars.ContextVar(
    "pytest_citations_shared_pool", default=None
)

#: Kept-alive idle connections a shared pool holds (httpx's default is 20): a
#: batch at concurrency 16 to 32 keeps its page hosts and the judge warm. The
#: number of open connections is not capped, as it was not with a pool per unit:
#: a capped pool would queue requests and record the wait as a timeout.
KEEPALIVE_CONNECTIONS = 64

#: Errors a request meets when the server closed a kept-alive connection just as
#: it was reused (RFC 9112 §9.3.1: a client may retry an idempotent request then).
_STALE_CONNECTION_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
#: Methods retried after such an error (RFC 9110 §9.2.2). The judge's POST is
#: not: the judge has its own bounded retries, which count every attempt.
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

Send = Callable[[httpx.AsyncHTTPTransport, httpx.Request], Awaitable[httpx.Response]]


def new_connection_pool() -> httpx.AsyncHTTPTransport:
    """A verifying httpx transport (one connection pool) that never retries by itself."""
    return httpx.AsyncHTTPTransport(
        verify=ssl_context(),
        retries=0,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=KEEPALIVE_CONNECTIONS),
    )


@asynccontextmanager
async def shared_connections() -> AsyncIterator[None]:
    """Every live request inside the block (and in tasks it starts) shares one pool.

    A claim's citations, or a whole batch, then reuse kept-alive connections and
    TLS sessions instead of opening one per page fetch and per judge call
    (measured: half the CPU of a request to a local server; over the internet a
    TLS handshake and a round trip saved each time). Nested blocks reuse the
    outer pool. The pool is bound to the running event loop, built by the first
    live request and closed when the block ends; the block's caller must not
    leave tasks sending after it (``Verifier.averify`` and ``run_batch`` cancel
    and await theirs). A request outside any block, in another loop, or after
    its block ended uses a pool of its own per unit of work.
    """
    outer = _SHARED_POOL.get()
    if outer is not None and outer.usable():
        yield
        return
    slot = _PoolSlot(asyncio.get_running_loop())
    token = _SHARED_POOL.set(slot)
    try:
        yield
    finally:
        _SHARED_POOL.reset(token)
        slot.closed = True
        if slot.pool is not None:
            await slot.pool.aclose()


async def _send_default(pool: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
    return await pool.handle_async_request(request)


class PooledTransport(httpx.AsyncBaseTransport):
    """Sends through the :func:`shared_connections` pool, else through a pool of its own.

    ``send`` is how a request goes out through a pool (the cassette recorder
    passes the httpx method as it was before a user's vcrpy cassette patched
    it). An idempotent request (GET, HEAD) that fails on a connection the pool
    had kept alive is sent once more: the server closed the connection as we
    reused it, a race every HTTP client with keep-alive must absorb. Whether the
    attempt reused a connection is read from httpcore's ``trace`` extension (no
    ``connection.connect_tcp`` event); a failure on a new connection is final.
    """

    def __init__(self, send: Send = _send_default) -> None:
        self._send = send
        self._own: httpx.AsyncHTTPTransport | None = None

    def _pool(self) -> httpx.AsyncHTTPTransport:
        slot = _SHARED_POOL.get()
        if slot is not None and slot.usable():
            return slot.get()
        if self._own is None:
            self._own = new_connection_pool()
        return self._own

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool = self._pool()
        if request.method not in _IDEMPOTENT_METHODS:
            return await self._send(pool, request)
        extensions = request.extensions
        connected = False
        outer_trace = extensions.get("trace")

        async def trace(event: str, info: dict[str, Any]) -> None:
            nonlocal connected
            if event.startswith("connection.connect_"):
                connected = True
            if outer_trace is not None:
                await outer_trace(event, info)

        request.extensions = {**extensions, "trace": trace}
        try:
            return await self._send(pool, request)
        except _STALE_CONNECTION_ERRORS:
            if connected:
                raise
        finally:
            request.extensions = extensions
        return await self._send(pool, request)

    async def aclose(self) -> None:
        if self._own is not None:
            await self._own.aclose()
            self._own = None


class LiveTransport(httpx.AsyncBaseTransport):
    """The real network, with TLS verification on, behind the two checks above."""

    def __init__(
        self,
        *,
        allow_private_hosts: bool = False,
        inner: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._inner = inner or PooledTransport()
        self.allow_private_hosts = allow_private_hosts

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        missing = request.extensions.get(MISSING_CREDENTIAL)
        if missing:
            variable, purpose = missing
            raise MissingCredentialError(variable, purpose)
        guarded = bool(request.extensions.get(GUARD_ADDRESS)) and not self.allow_private_hosts
        if guarded:
            await self._check_host(request.url)
        response = await self._inner.handle_async_request(request)
        if guarded:
            await self._check_peer(request.url, response)
        return response

    async def _check_host(self, url: httpx.URL) -> None:
        host = url.host
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = [str(ipaddress.ip_address(host))]
        except ValueError:
            addresses = await _resolve(host, port)
        for address in addresses:
            if not is_public_address(address):
                raise BlockedAddressError(
                    f"{host} resolves to {address}, a non-public address; set "
                    "CITATIONS_ALLOW_PRIVATE_HOSTS=1 (or ini citations_allow_private_hosts "
                    "= true) to allow it"
                )

    async def _check_peer(self, url: httpx.URL, response: httpx.Response) -> None:
        """Refuse the answer if the connection ended up at a non-public address.

        The host was resolved and checked before connecting, but the connection
        resolves it again: a DNS answer that changes in between (DNS rebinding)
        would slip past that check. The peer address is what was really reached,
        and no byte of its body is read before it is checked.
        """
        stream = response.extensions.get("network_stream")
        peer = stream.get_extra_info("server_addr") if stream is not None else None
        if not peer:
            return
        address = str(peer[0])
        if not is_public_address(address):
            await response.aclose()
            raise BlockedAddressError(
                f"{url.host} was reached at {address}, a non-public address (its DNS answer "
                "changed after the check); set CITATIONS_ALLOW_PRIVATE_HOSTS=1 to allow it"
            )

    async def aclose(self) -> None:
        await self._inner.aclose()


class Recorder(Protocol):
    """Gives each unit of network work its transport (live, or a cassette)."""

    def session(
        self, kind: UnitKind, key: Mapping[str, str]
    ) -> AbstractAsyncContextManager[httpx.AsyncBaseTransport]: ...


class LiveRecorder:
    """No cassettes: every unit goes to the network through one :class:`LiveTransport`."""

    def __init__(self, *, allow_private_hosts: bool = False) -> None:
        self.allow_private_hosts = allow_private_hosts

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[httpx.AsyncBaseTransport]:
        transport = LiveTransport(allow_private_hosts=self.allow_private_hosts)
        try:
            yield transport
        finally:
            await transport.aclose()

    def session(
        self, kind: UnitKind, key: Mapping[str, str]
    ) -> AbstractAsyncContextManager[httpx.AsyncBaseTransport]:
        return self._session()


def client_for(transport: httpx.AsyncBaseTransport, *, timeout: float) -> httpx.AsyncClient:
    """The one way stages build a client: our agent, a timeout, redirects handled by the caller.

    Redirects are never followed by httpx itself: the fetcher follows them hop by
    hop so each hop is recorded, counted and address-checked.
    """
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(timeout),
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT},
    )
