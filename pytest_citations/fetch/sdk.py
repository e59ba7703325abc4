"""The official ``crawlbase`` SDK (1.1.0) as an opt-in fetcher: ``fetcher="crawlbase-sdk"``.

Seed 000 calls the Crawling API through this SDK; it is kept so a user can
reproduce that setup, with exactly the same rules as the httpx fetcher (the
rule logic is :class:`~pytest_citations.fetch.crawlbase.CrawlSession`, shared;
only the call differs). It is **not** the default because, in the pinned 1.1.0:

* it builds ``ssl.SSLContext(ssl.PROTOCOL_TLS)`` per request, which verifies no
  certificate (and warns with a DeprecationWarning on every call);
* ``get(url, options={})`` writes into a shared mutable default dict, so options
  leak from one call into the next unless a fresh dict is passed every time;
* an instance is not thread-safe (one shared instance under four threads
  returned answers for other requests' URLs);
* it keeps only ``original_status``, ``cb_status``/``pc_status`` and ``url`` of
  the response headers: ``rid`` and ``storage_url`` are dropped, so pages fetched
  this way have no rid to audit or replay; and a 4xx/5xx answer loses its body
  and headers (no ``Retry-After``);
* it reads the whole body into memory (the size cap applies only afterwards);
* it uses urllib, not httpx, so it cannot go through the recorder's transport:
  its traffic is **live only**, never recorded or replayed from a cassette.

So this module creates one ``CrawlingAPI`` per call, passes a fresh options
dict each time, runs the blocking call in a worker thread
(:func:`~pytest_citations._threads.run_blocking`), points the instance at
``settings.crawlbase_api_url``
(the SDK reads a module constant; a subclass overrides ``buildURL`` per
instance), and still opens ``recorder.session("page", …)`` around the page so
the unit of work is the same as for the other fetchers.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from pytest_citations._threads import run_blocking
from pytest_citations.errors import MissingCredentialError
from pytest_citations.fetch.crawlbase import (
    ApiAnswer,
    CrawlSession,
    Mode,
    TransientFailure,
    int_or_none,
    scrub,
)
from pytest_citations.fetch.rules import Page
from pytest_citations.settings import Settings
from pytest_citations.transport import Recorder

FETCHER = "crawlbase-sdk"


def _pointed_api(api_url: str, token: str, timeout: float) -> Any:
    """A ``CrawlingAPI`` whose requests go to ``api_url`` instead of the SDK's constant."""
    from crawlbase import CrawlingAPI

    class PointedCrawlingAPI(CrawlingAPI):  # type: ignore[misc]
        def buildURL(self, options: dict[str, Any]) -> str:
            query = urlencode(options or {})
            base = api_url if api_url.endswith("/") else api_url + "/"
            return f"{base}{self.base_path}?token={quote(self.options['token'], safe='')}&{query}"

    return PointedCrawlingAPI({"token": token, "timeout": timeout})


def _sdk_get(
    api_url: str, token: str, url: str, options: dict[str, str], timeout: float
) -> dict[str, Any]:
    """One blocking SDK call on a fresh instance with a fresh options dict."""
    api = _pointed_api(api_url, token, timeout)
    response: dict[str, Any] = api.get(url, dict(options))
    return response


class SdkCrawlSession(CrawlSession):
    """:class:`CrawlSession` whose calls go through the SDK in a worker thread."""

    fetcher = FETCHER

    async def send_once(self, mode: Mode) -> ApiAnswer:
        token, variable, _ = self.token_for(mode)
        if token is None or not token.get_secret_value():
            # The SDK cannot replay from a cassette, so a missing token is final.
            raise MissingCredentialError(variable, "the Crawlbase SDK fetcher (crawlbase-sdk)")
        options = {key: str(value) for key, value in self.params(mode) if key != "url"}
        try:
            response = await run_blocking(
                _sdk_get,
                self.settings.crawlbase_api_url,
                token.get_secret_value(),
                self.url,
                options,
                self.settings.timeout,
            )
        except Exception as error:  # urllib's URLError, socket timeouts, resets
            detail = scrub(f"{type(error).__name__}: {error}", self.settings)
            raise TransientFailure(f"the crawlbase SDK call failed ({detail})") from None
        headers = response.get("headers") or {}
        body = response.get("body") or b""
        if isinstance(body, bytes):
            cap = self.settings.max_page_bytes
            truncated = len(body) > cap
            text = body[:cap].decode("utf-8", errors="replace")
        else:
            truncated = False
            text = str(body)
        final_url = headers.get("url")
        return ApiAnswer(
            status=int(response.get("status_code") or 0),
            original_status=int_or_none(headers.get("original_status")),
            cb_status=int_or_none(headers.get("cb_status") or headers.get("pc_status")),
            final_url=None if final_url in (None, "", "None") else str(final_url),
            rid=None,  # the SDK drops rid and storage_url
            text=text,
            truncated=truncated,
        )


async def fetch_sdk(url: str, settings: Settings, recorder: Recorder) -> Page:
    """Fetch ``url`` through the crawlbase SDK (live only) with the shared rules."""
    async with recorder.session("page", {"source": url, "fetcher": FETCHER}):
        return await SdkCrawlSession(url, settings).run()
