"""The Crawlbase Crawling API over httpx: the default fetcher when ``CRAWLBASE_TOKEN`` is set.

One page is one session (``recorder.session("page", {"source", "fetcher": "crawlbase"})``)
holding every API call the rules need (DESIGN.md §5, seed 000):

1. ``GET {api}?token=…&url=…&format=md&md_readability=true&store=true``;
2. only if the readable Markdown is thin (fewer than 200 non-whitespace
   characters): the same URL again without ``md_readability``;
3. only on a signal that the page needs a browser — HTTP 520 from the API (failed
   crawl, empty body, no headers), ``cb_status`` 207 (origin answered 200 with an
   empty page), or still thin after step 2 — steps 1-2 again rendered with
   JavaScript: ``CRAWLBASE_JS_TOKEN`` when set, else ``javascript=true`` on the
   normal token. The rendered page goes through exactly the same checks.

Read from each answer: ``original_status`` (the cited site's answer), ``cb_status``
(falling back to the older ``pc_status``), ``url`` (final URL after redirects),
and the ``rid`` — from a ``rid`` header when present, else parsed from
``storage_url``, whose query also holds the token: the URL itself is never kept.

API errors:

* 401/403 from the API means the token was refused. That is a configuration
  problem every citation would hit, not a property of the cited page, so it
  raises :class:`CrawlbaseAuthError` (a :class:`ConfigurationError`) naming the
  variable, never its value.
* 429 and 5xx (other than 520) are retried ``settings.retries`` times with
  backoff, honouring ``Retry-After``; then the citation is ``unreachable`` with
  reason ``crawl_failed``. So are transport errors talking to the API.

The token never appears in a :class:`Page`, an exception message or a log line:
requests are built without it and a small wrapper transport adds it below the
client (httpx's own ``HTTP Request: GET …`` log line is written from the request
the client built, so it never shows the token), and a filter on httpx's and
httpcore's loggers masks ``token=…`` in their DEBUG wire traces, which print the
``storage_url`` response header verbatim. A request whose token is not set
carries ``MISSING_CREDENTIAL`` instead, so a cassette replays with no token and
only a live call is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
from pydantic import SecretStr

from pytest_citations import transport as transport_module
from pytest_citations.errors import CitationsError, ConfigurationError
from pytest_citations.fetch import rules
from pytest_citations.fetch.rules import Page
from pytest_citations.models import Label, Reason
from pytest_citations.settings import Settings
from pytest_citations.transport import Recorder

logger = logging.getLogger(__name__)

FETCHER = "crawlbase"
TOKEN_VARIABLE = "CRAWLBASE_TOKEN"
JS_TOKEN_VARIABLE = "CRAWLBASE_JS_TOKEN"
#: The API answers 520 when a crawl failed (empty body, no headers, not billed).
FAILED_CRAWL_STATUS = 520
#: ``cb_status`` 207: the origin answered 200 with an empty page.
EMPTY_PAGE_CB_STATUS = 207
#: Request extension holding the token (a ``SecretStr``) for the wrapper transport.
_TOKEN_EXTENSION = "pytest_citations.crawlbase_token"


class CrawlbaseAuthError(ConfigurationError):
    """The Crawlbase API refused the token (HTTP 401/403)."""

    def __init__(self, variable: str, status: int) -> None:
        self.variable = variable
        super().__init__(
            f"the Crawlbase API refused {variable} (HTTP {status}): check the token in "
            f"the environment variable {variable}."
        )


class StoredPageError(CitationsError):
    """The Storage API has no page for a rid, or could not be read."""


@dataclass(frozen=True)
class Mode:
    """One kind of Crawling API call."""

    readability: bool
    javascript: bool

    def describe(self) -> str:
        parts = ["md_readability" if self.readability else "raw Markdown"]
        if self.javascript:
            parts.append("JavaScript")
        return " + ".join(parts)


@dataclass(frozen=True)
class ApiAnswer:
    """What one Crawling API call said, already stripped of anything secret."""

    status: int
    original_status: int | None = None
    cb_status: int | None = None
    final_url: str | None = None
    rid: str | None = None
    text: str = ""
    truncated: bool = False
    retry_after: str | None = None


class TransientFailure(Exception):
    """One API call failed below HTTP (timeout, connection): worth retrying."""


@dataclass(frozen=True)
class _Escalate:
    why: str
    answer: ApiAnswer


def int_or_none(value: object) -> int | None:
    """Header values arrive as strings (``'None'`` from the SDK when absent)."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def rid_from_storage_url(storage_url: str | None) -> str | None:
    """The ``rid`` query value of a ``storage_url``; the URL (and its token) is dropped."""
    if not storage_url:
        return None
    values = parse_qs(urlsplit(storage_url).query).get("rid")
    return values[0] if values else None


def storage_api_url(settings: Settings) -> str:
    """The Storage API endpoint beside the configured Crawling API base URL."""
    base = settings.crawlbase_api_url
    return urljoin(base if base.endswith("/") else base + "/", "storage")


def scrub(text: str, settings: Settings) -> str:
    """``text`` with every secret of ``settings`` masked (for details built from errors)."""
    for secret in settings.secret_values():
        text = text.replace(secret, "***")
    return text


class CrawlSession:
    """The rules of one page over the Crawling API; subclasses supply :meth:`send_once`."""

    fetcher = FETCHER

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings

    # -- one call -----------------------------------------------------------------------

    def token_for(self, mode: Mode) -> tuple[SecretStr | None, str, bool]:
        """(token, its variable, whether ``javascript=true`` must be sent) for ``mode``."""
        if mode.javascript and self.settings.crawlbase_js_token is not None:
            return self.settings.crawlbase_js_token, JS_TOKEN_VARIABLE, False
        return self.settings.crawlbase_token, TOKEN_VARIABLE, mode.javascript

    def params(self, mode: Mode) -> list[tuple[str, str | int | float | bool | None]]:
        """The query parameters of one call, without the token."""
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("url", self.url),
            ("format", "md"),
        ]
        if mode.readability:
            params.append(("md_readability", "true"))
        params.append(("store", "true"))
        if self.token_for(mode)[2]:
            params.append(("javascript", "true"))
        return params

    async def send_once(self, mode: Mode) -> ApiAnswer:  # pragma: no cover - abstract
        raise NotImplementedError

    async def send(self, mode: Mode) -> ApiAnswer | Page:
        """One logical call with bounded retries: an answer, or a ``crawl_failed`` page."""
        attempts = self.settings.retries + 1
        last = ""
        for attempt in range(attempts):
            delay: float | None
            try:
                answer = await self.send_once(mode)
            except TransientFailure as failure:
                last = str(failure)
                delay = rules.retry_delay(None, attempt, self.settings.retry_backoff)
            else:
                if answer.status in (401, 403):
                    raise CrawlbaseAuthError(self.token_for(mode)[1], answer.status)
                if answer.status not in rules.RETRYABLE_STATUSES:
                    return answer
                last = f"HTTP {answer.status}"
                delay = rules.retry_delay(answer.retry_after, attempt, self.settings.retry_backoff)
            if attempt + 1 >= attempts or delay is None:
                break
            logger.debug("Crawling API %s for %s; retrying in %.1fs", last, self.url, delay)
            await rules.sleep(delay)
        return rules.labelled(
            self.url,
            Label.unreachable,
            Reason.crawl_failed,
            f"the Crawling API failed ({mode.describe()}): {last}",
        )

    # -- the rules -----------------------------------------------------------------------

    def interpret(self, answer: ApiAnswer) -> Page | _Escalate | None:
        """A decided page, a signal to escalate to JavaScript, or None when thin."""
        if answer.status == FAILED_CRAWL_STATUS:
            return _Escalate("the Crawling API answered 520 (failed crawl)", answer)
        if answer.status != 200:
            return rules.labelled(
                self.url,
                Label.unreachable,
                Reason.crawl_failed,
                f"the Crawling API answered HTTP {answer.status}",
                original_status=answer.original_status,
            )
        if answer.cb_status == EMPTY_PAGE_CB_STATUS:
            return _Escalate("cb_status 207 (the origin answered an empty page)", answer)
        if answer.cb_status not in (None, 200):
            return rules.labelled(
                self.url,
                Label.unreachable,
                Reason.crawl_failed,
                f"the crawl ended with cb_status {answer.cb_status}",
                final_url=answer.final_url,
                original_status=answer.original_status,
                rid=answer.rid,
            )
        final_url = answer.final_url or self.url
        decided = rules.check_page(
            self.url,
            self.url,
            text=answer.text,
            final_url=final_url,
            original_status=answer.original_status,
            rid=answer.rid,
        )
        if decided is not None:
            return decided
        if rules.is_thin(answer.text):
            return None
        detail = None
        if answer.truncated:
            detail = f"page cut at {self.settings.max_page_bytes} bytes"
        return rules.accepted(
            self.url,
            answer.text,
            final_url=final_url,
            original_status=answer.original_status,
            rid=answer.rid,
            detail=detail,
        )

    async def attempt(self, javascript: bool) -> Page | _Escalate:
        """Readability first; the raw Markdown only when that was thin."""
        first = await self.send(Mode(readability=True, javascript=javascript))
        if isinstance(first, Page):
            return first
        outcome = self.interpret(first)
        if outcome is not None:
            return outcome
        second = await self.send(Mode(readability=False, javascript=javascript))
        if isinstance(second, Page):
            return second
        outcome = self.interpret(second)
        if outcome is not None:
            return outcome
        return _Escalate("still thin without md_readability", second)

    async def run(self) -> Page:
        outcome = await self.attempt(javascript=False)
        if isinstance(outcome, Page):
            return outcome
        logger.debug("escalating %s to JavaScript rendering: %s", self.url, outcome.why)
        rendered = await self.attempt(javascript=True)
        if isinstance(rendered, Page):
            return rendered
        answer = rendered.answer
        if answer.status == FAILED_CRAWL_STATUS:
            return rules.labelled(
                self.url,
                Label.unreachable,
                Reason.crawl_failed,
                "the Crawling API answered 520 (failed crawl) with and without JavaScript",
            )
        return rules.thin_outcome(
            self.url,
            answer.text,
            final_url=answer.final_url or self.url,
            original_status=answer.original_status,
            rid=answer.rid,
            tried="md_readability, raw Markdown and JavaScript rendering",
        )


class _TokenTransport(httpx.AsyncBaseTransport):
    """Adds the token to the query below the client, so no log line shows it.

    It does not own the transport it wraps: the recorder session does.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        token = request.extensions.get(_TOKEN_EXTENSION)
        if isinstance(token, SecretStr):
            extensions = {k: v for k, v in request.extensions.items() if k != _TOKEN_EXTENSION}
            url = request.url.copy_with(
                params=[("token", token.get_secret_value()), *request.url.params.multi_items()]
            )
            request = httpx.Request(
                request.method,
                url,
                headers=request.headers,
                stream=request.stream,
                extensions=extensions,
            )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        return None


def token_extensions(token: SecretStr | None, variable: str, purpose: str) -> dict[str, object]:
    """Request extensions carrying the token, or the missing-credential marker."""
    if token is None or not token.get_secret_value():
        return {transport_module.MISSING_CREDENTIAL: (variable, purpose)}
    return {_TOKEN_EXTENSION: token}


class HttpxCrawlSession(CrawlSession):
    """:class:`CrawlSession` over an httpx client built on the recorder's transport."""

    def __init__(self, url: str, settings: Settings, client: httpx.AsyncClient) -> None:
        super().__init__(url, settings)
        self.client = client

    async def send_once(self, mode: Mode) -> ApiAnswer:
        token, variable, _ = self.token_for(mode)
        extensions = token_extensions(token, variable, "the Crawlbase fetcher")
        request = self.client.build_request(
            "GET", self.settings.crawlbase_api_url, params=self.params(mode), extensions=extensions
        )
        try:
            response = await self.client.send(request, stream=True)
            try:
                body, truncated = await rules.read_capped(response, self.settings.max_page_bytes)
            finally:
                await response.aclose()
        except httpx.TimeoutException:
            raise TransientFailure("timed out talking to the Crawling API") from None
        except httpx.TransportError as error:
            detail = scrub(f"{type(error).__name__}: {error}", self.settings)
            raise TransientFailure(f"cannot reach the Crawling API ({detail})") from None
        headers = response.headers
        rid = headers.get("rid") or rid_from_storage_url(headers.get("storage_url"))
        text = body.decode(response.charset_encoding or "utf-8", errors="replace")
        return ApiAnswer(
            status=response.status_code,
            original_status=int_or_none(headers.get("original_status")),
            cb_status=int_or_none(headers.get("cb_status") or headers.get("pc_status")),
            final_url=headers.get("url") or None,
            rid=rid or None,
            text=text,
            truncated=truncated,
            retry_after=headers.get("Retry-After"),
        )


async def fetch_crawlbase(url: str, settings: Settings, recorder: Recorder) -> Page:
    """Fetch ``url`` through the Crawling API with every rule of DESIGN.md §5."""
    key = {"source": url, "fetcher": FETCHER}
    async with recorder.session("page", key) as inner:
        client = transport_module.client_for(_TokenTransport(inner), timeout=settings.timeout)
        async with client:
            return await HttpxCrawlSession(url, settings, client).run()


async def read_stored_page(rid: str, settings: Settings, recorder: Recorder) -> str:
    """The page stored under ``rid`` (Storage API), for replaying an audit row.

    Either token reads any rid of the account (DESIGN.md §10): ``CRAWLBASE_TOKEN``
    is used when set, else ``CRAWLBASE_JS_TOKEN``. Raises
    :class:`CrawlbaseAuthError` when the token is refused and
    :class:`StoredPageError` when nothing is stored under the rid (pages are kept
    30 days) or the API keeps failing.
    """
    if not rid:
        raise ValueError("rid is required")
    token, variable = settings.crawlbase_token, TOKEN_VARIABLE
    if token is None and settings.crawlbase_js_token is not None:
        token, variable = settings.crawlbase_js_token, JS_TOKEN_VARIABLE
    extensions = token_extensions(
        token, TOKEN_VARIABLE, "the Crawlbase Storage API (CRAWLBASE_JS_TOKEN works too)"
    )
    attempts = settings.retries + 1
    last = ""
    async with recorder.session("storage", {"rid": rid}) as inner:
        client = transport_module.client_for(_TokenTransport(inner), timeout=settings.timeout)
        async with client:
            for attempt in range(attempts):
                retry_after: str | None = None
                try:
                    response = await client.get(
                        storage_api_url(settings), params={"rid": rid}, extensions=extensions
                    )
                except httpx.TimeoutException:
                    last = "timed out"
                except httpx.TransportError as error:
                    last = scrub(f"{type(error).__name__}: {error}", settings)
                else:
                    status = response.status_code
                    if status == 200:
                        return response.text
                    if status in (401, 403):
                        raise CrawlbaseAuthError(variable, status)
                    if status == 404:
                        raise StoredPageError(
                            f"no stored page for rid {rid!r} (never stored, or older than "
                            "the 30 days Crawlbase keeps pages)"
                        )
                    if status not in rules.RETRYABLE_STATUSES:
                        raise StoredPageError(f"the Storage API answered HTTP {status}")
                    last = f"HTTP {status}"
                    retry_after = response.headers.get("Retry-After")
                delay = rules.retry_delay(retry_after, attempt, settings.retry_backoff)
                if attempt + 1 >= attempts or delay is None:
                    break
                await rules.sleep(delay)
    raise StoredPageError(f"the Storage API failed for rid {rid!r}: {last}")
