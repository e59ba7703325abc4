"""The Crawling API fetcher (httpx) and the Storage API against the Crawlbase simulator."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from simulators.crawlbase import JS_TOKEN, NORMAL_TOKEN, Target

from pytest_citations.errors import ConfigurationError, MissingCredentialError
from pytest_citations.fetch import Page, fetch_page
from pytest_citations.fetch.crawlbase import (
    CrawlbaseAuthError,
    StoredPageError,
    read_stored_page,
    rid_from_storage_url,
)
from pytest_citations.models import Label
from pytest_citations.settings import Settings
from pytest_citations.transport import LiveRecorder

SITE = "https://example.com"


def settings(api: Any, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "crawlbase_api_url": api.url + "/",
        "crawlbase_token": NORMAL_TOKEN,
        "timeout": 5.0,
    }
    values.update(overrides)
    return Settings(**values)


def fetch(api: Any, url: str, **overrides: Any) -> Page:
    recorder = LiveRecorder(allow_private_hosts=False)  # the API call is never address-guarded
    return asyncio.run(fetch_page(url, settings(api, **overrides), recorder))


def test_token_makes_crawlbase_the_default_fetcher(crawlbase_api: Any) -> None:
    assert settings(crawlbase_api).resolved_fetcher == "crawlbase"


def test_request_asks_for_readable_markdown_and_storage(crawlbase_api: Any) -> None:
    fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point")
    (query,) = crawlbase_api.state.requests
    assert query == {
        "token": NORMAL_TOKEN,
        "url": f"{SITE}/articles/water-boiling-point",
        "format": "md",
        "md_readability": "true",
        "store": "true",
    }


def test_article_is_accepted_with_status_final_url_and_rid(crawlbase_api: Any) -> None:
    page = fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point")
    assert page.label is None
    assert "Water boils at 100 degrees Celsius at sea level." in page.text
    assert page.original_status == 200
    assert page.final_url == f"{SITE}/articles/water-boiling-point"
    assert page.rid == "rid-0001"


def test_readable_page_is_fetched_once(crawlbase_api: Any) -> None:
    url = f"{SITE}/articles/water-boiling-point"
    fetch(crawlbase_api, url)
    assert crawlbase_api.state.calls_for(url) == {"readable": 1}


def test_thin_readable_page_is_refetched_without_readability(crawlbase_api: Any) -> None:
    url = f"{SITE}/short-note"
    page = fetch(crawlbase_api, url)
    assert page.label is None
    assert "Water boils at 100" in page.text
    assert crawlbase_api.state.calls_for(url) == {"readable": 1, "full": 1}
    assert page.rid == "rid-0002"  # the rid of the page actually used


def test_origin_404_is_unreachable_and_not_refetched(crawlbase_api: Any) -> None:
    url = f"{SITE}/old-report"
    page = fetch(crawlbase_api, url)
    assert (page.label, page.reason, page.original_status) == (Label.unreachable, "http_404", 404)
    assert page.rid == "rid-0001"
    assert crawlbase_api.state.calls_for(url) == {"readable": 1}


def test_origin_410_is_unreachable_http_410(crawlbase_api: Any) -> None:
    page = fetch(crawlbase_api, f"{SITE}/retired")
    assert (page.label, page.reason) == (Label.unreachable, "http_410")


def test_deep_link_landing_on_homepage_is_not_found(crawlbase_api: Any) -> None:
    page = fetch(crawlbase_api, f"{SITE}/articles/moved")
    assert (page.label, page.reason) == (Label.not_found, "redirected_to_homepage")
    assert page.final_url == f"{SITE}/"


def test_soft_404_is_not_found_without_escalation(crawlbase_api: Any) -> None:
    url = f"{SITE}/missing-article"
    page = fetch(crawlbase_api, url)
    assert (page.label, page.reason) == (Label.not_found, "soft_404")
    assert crawlbase_api.state.calls_for(url) == {"readable": 1}


def test_long_article_mentioning_404_is_accepted(crawlbase_api: Any) -> None:
    page = fetch(crawlbase_api, f"{SITE}/articles/http-404-explained")
    assert page.label is None


def test_api_520_escalates_to_javascript_token(crawlbase_api: Any) -> None:
    url = f"{SITE}/spa-520"
    page = fetch(crawlbase_api, url, crawlbase_js_token=JS_TOKEN)
    assert page.label is None and "Water boils" in page.text
    assert crawlbase_api.state.calls_for(url) == {"readable": 1, "js-readable": 1}
    assert crawlbase_api.state.requests[-1]["token"] == JS_TOKEN
    assert "javascript" not in crawlbase_api.state.requests[-1]


def test_without_js_token_escalation_sends_javascript_true(crawlbase_api: Any) -> None:
    url = f"{SITE}/spa-520"
    page = fetch(crawlbase_api, url)
    assert page.label is None
    last = crawlbase_api.state.requests[-1]
    assert last["token"] == NORMAL_TOKEN and last["javascript"] == "true"


def test_cb_status_207_escalates_to_javascript(crawlbase_api: Any) -> None:
    url = f"{SITE}/empty-200"
    page = fetch(crawlbase_api, url)
    assert page.label is None
    assert crawlbase_api.state.calls_for(url) == {"readable": 1, "js-readable": 1}


def test_still_thin_after_readability_retry_escalates(crawlbase_api: Any) -> None:
    url = f"{SITE}/app"
    page = fetch(crawlbase_api, url)
    assert page.label is None and "Water boils" in page.text
    assert crawlbase_api.state.calls_for(url) == {"readable": 1, "full": 1, "js-readable": 1}


def test_rendered_page_gets_the_readability_fallback_too(crawlbase_api: Any) -> None:
    url = f"{SITE}/js-short"
    crawlbase_api.state.targets[url] = Target(
        markdown="x", js=Target(markdown="# T\n", markdown_full="# T\n\n" + "word " * 80)
    )
    page = fetch(crawlbase_api, url)
    assert page.label is None
    assert crawlbase_api.state.calls_for(url) == {
        "readable": 1,
        "full": 1,
        "js-readable": 1,
        "js-full": 1,
    }


def test_rendered_page_goes_through_the_same_checks(crawlbase_api: Any) -> None:
    url = f"{SITE}/js-gone"
    crawlbase_api.state.targets[url] = Target(
        api_status=520, js=Target(original_status=404, markdown="# Not Found\n")
    )
    page = fetch(crawlbase_api, url)
    assert (page.label, page.reason) == (Label.unreachable, "http_404")


def test_thin_everywhere_is_thin_page(crawlbase_api: Any) -> None:
    url = f"{SITE}/always-thin"
    page = fetch(crawlbase_api, url)
    assert (page.label, page.reason) == (Label.not_found, "thin_page")
    assert crawlbase_api.state.calls_for(url) == {
        "readable": 1,
        "full": 1,
        "js-readable": 1,
        "js-full": 1,
    }


def test_520_with_and_without_javascript_is_crawl_failed(crawlbase_api: Any) -> None:
    url = f"{SITE}/dead-crawl"
    crawlbase_api.state.targets[url] = Target(api_status=520)
    page = fetch(crawlbase_api, url)
    assert (page.label, page.reason) == (Label.unreachable, "crawl_failed")


def test_rid_header_is_used_when_present(crawlbase_api: Any) -> None:
    crawlbase_api.state.rid_header = True
    page = fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point")
    assert page.rid == "rid-0001"


def test_pc_status_is_read_when_cb_status_is_absent(crawlbase_api: Any) -> None:
    crawlbase_api.state.cb_status_header = False
    url = f"{SITE}/empty-200"  # pc_status 207 must still trigger the escalation
    page = fetch(crawlbase_api, url)
    assert page.label is None
    assert crawlbase_api.state.calls_for(url) == {"readable": 1, "js-readable": 1}


def test_rid_is_parsed_from_storage_url_and_the_url_dropped() -> None:
    url = "https://api.crawlbase.com/storage?token=SECRET&rid=abc123"
    assert rid_from_storage_url(url) == "abc123"
    assert rid_from_storage_url(None) is None
    assert rid_from_storage_url("https://api.crawlbase.com/storage?token=x") is None


def test_token_never_appears_in_page(crawlbase_api: Any) -> None:
    for path in ("/articles/water-boiling-point", "/old-report", "/app", "/always-thin"):
        page = fetch(crawlbase_api, SITE + path, crawlbase_js_token=JS_TOKEN)
        for text in (repr(page), page.model_dump_json(), str(page.model_dump())):
            assert NORMAL_TOKEN not in text and JS_TOKEN not in text


def test_token_never_appears_in_logs(crawlbase_api: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        fetch(crawlbase_api, f"{SITE}/app")
    assert "HTTP Request" in caplog.text  # httpx did log the calls...
    assert NORMAL_TOKEN not in caplog.text  # ...without the token


def test_bad_token_raises_configuration_error_naming_the_variable(crawlbase_api: Any) -> None:
    with pytest.raises(CrawlbaseAuthError) as caught:
        fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point", crawlbase_token="wrong-x")
    assert isinstance(caught.value, ConfigurationError)
    assert "CRAWLBASE_TOKEN" in str(caught.value) and "wrong-x" not in str(caught.value)


def test_missing_token_is_refused_only_when_the_call_goes_out(crawlbase_api: Any) -> None:
    with pytest.raises(MissingCredentialError) as caught:
        fetch(
            crawlbase_api,
            f"{SITE}/articles/water-boiling-point",
            crawlbase_token=None,
            fetcher="crawlbase",
        )
    assert caught.value.variable == "CRAWLBASE_TOKEN"
    assert crawlbase_api.state.requests == []


def test_missing_token_request_is_built_for_replay(crawlbase_api: Any) -> None:
    """A cassette-like transport answers the tokenless request: no key needed to replay."""
    from contextlib import asynccontextmanager

    import httpx

    from pytest_citations import transport

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        headers = {
            "original_status": "200",
            "cb_status": "200",
            "url": str(request.url.params["url"]),
        }
        return httpx.Response(200, text="# Replayed\n\n" + "evidence " * 40, headers=headers)

    class Replay:
        def session(self, kind: str, key: Any) -> Any:
            @asynccontextmanager
            async def opened() -> Any:
                yield httpx.MockTransport(answer)

            return opened()

    settings_ = Settings(fetcher="crawlbase", crawlbase_api_url=crawlbase_api.url + "/")
    page = asyncio.run(fetch_page(f"{SITE}/a", settings_, Replay()))  # type: ignore[arg-type]
    assert page.label is None and "Replayed" in page.text
    assert "token" not in seen[0].url.params
    assert seen[0].extensions[transport.MISSING_CREDENTIAL] == (
        "CRAWLBASE_TOKEN",
        "the Crawlbase fetcher",
    )


def test_rate_limit_is_retried_honouring_retry_after(crawlbase_api: Any) -> None:
    url = f"{SITE}/articles/water-boiling-point"
    crawlbase_api.state.targets[url].api_errors = [429, 503]
    page = fetch(crawlbase_api, url)
    assert page.label is None
    assert crawlbase_api.state.calls_for(url) == {"readable": 3}


def test_persistent_api_errors_become_crawl_failed(crawlbase_api: Any) -> None:
    url = f"{SITE}/articles/water-boiling-point"
    crawlbase_api.state.targets[url].api_errors = [503] * 10
    page = fetch(crawlbase_api, url, retries=2)
    assert (page.label, page.reason) == (Label.unreachable, "crawl_failed")
    assert crawlbase_api.state.calls_for(url) == {"readable": 3}
    assert page.detail is not None and NORMAL_TOKEN not in page.detail


def test_unreachable_api_is_crawl_failed_without_leaking_the_token() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings_ = Settings(
        crawlbase_api_url=f"http://127.0.0.1:{port}/", crawlbase_token=NORMAL_TOKEN, retries=0
    )
    page = asyncio.run(fetch_page(f"{SITE}/a", settings_, LiveRecorder()))
    assert (page.label, page.reason) == (Label.unreachable, "crawl_failed")
    assert NORMAL_TOKEN not in page.model_dump_json()


def test_storage_api_returns_the_stored_page(crawlbase_api: Any) -> None:
    page = fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point")
    assert page.rid is not None
    text = asyncio.run(read_stored_page(page.rid, settings(crawlbase_api), LiveRecorder()))
    assert "Water boils at 100 degrees Celsius" in text


def test_storage_api_works_with_the_js_token_alone(crawlbase_api: Any) -> None:
    page = fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point")
    assert page.rid is not None
    only_js = settings(crawlbase_api, crawlbase_token=None, crawlbase_js_token=JS_TOKEN)
    text = asyncio.run(read_stored_page(page.rid, only_js, LiveRecorder()))
    assert "Water boils" in text
    assert crawlbase_api.state.requests[-1]["token"] == JS_TOKEN


def test_storage_api_unknown_rid_raises_stored_page_error(crawlbase_api: Any) -> None:
    with pytest.raises(StoredPageError, match="rid-9999"):
        asyncio.run(read_stored_page("rid-9999", settings(crawlbase_api), LiveRecorder()))


def test_storage_api_without_any_token_is_refused_before_sending(crawlbase_api: Any) -> None:
    with pytest.raises(MissingCredentialError):
        asyncio.run(
            read_stored_page(
                "rid-0001", settings(crawlbase_api, crawlbase_token=None), LiveRecorder()
            )
        )
    assert crawlbase_api.state.requests == []
