"""The opt-in crawlbase SDK fetcher against the Crawlbase simulator (live only)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from simulators.crawlbase import JS_TOKEN, NORMAL_TOKEN

from pytest_citations.errors import MissingCredentialError
from pytest_citations.fetch import Page, fetch_page
from pytest_citations.fetch.crawlbase import CrawlbaseAuthError
from pytest_citations.models import Label
from pytest_citations.settings import Settings
from pytest_citations.transport import LiveRecorder

SITE = "https://example.com"
pytestmark = pytest.mark.filterwarnings("ignore:ssl.PROTOCOL_TLS is deprecated:DeprecationWarning")


class KeyRecorder(LiveRecorder):
    """Remembers the session keys it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[tuple[str, dict[str, str]]] = []

    def session(self, kind: Any, key: Any) -> Any:
        self.keys.append((kind, dict(key)))
        return super().session(kind, key)


def fetch(api: Any, url: str, recorder: LiveRecorder | None = None, **overrides: Any) -> Page:
    values: dict[str, Any] = {
        "fetcher": "crawlbase-sdk",
        "crawlbase_api_url": api.url + "/",
        "crawlbase_token": NORMAL_TOKEN,
        "timeout": 5.0,
    }
    values.update(overrides)
    return asyncio.run(fetch_page(url, Settings(**values), recorder or LiveRecorder()))


def test_sdk_fetches_through_the_configured_api_url(crawlbase_api: Any) -> None:
    recorder = KeyRecorder()
    page = fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point", recorder)
    assert page.label is None and "Water boils at 100" in page.text
    assert page.original_status == 200
    assert page.final_url == f"{SITE}/articles/water-boiling-point"
    assert recorder.keys == [
        ("page", {"source": f"{SITE}/articles/water-boiling-point", "fetcher": "crawlbase-sdk"})
    ]


def test_sdk_drops_the_rid(crawlbase_api: Any) -> None:
    page = fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point")
    assert page.rid is None


def test_sdk_options_do_not_leak_between_calls(crawlbase_api: Any) -> None:
    """The readability retry must not carry md_readability over (shared mutable default)."""
    fetch(crawlbase_api, f"{SITE}/short-note")
    fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point")
    first, second, third = crawlbase_api.state.requests
    assert first["md_readability"] == "true"
    assert "md_readability" not in second
    assert third["url"] == f"{SITE}/articles/water-boiling-point"
    assert third["md_readability"] == "true"


def test_sdk_applies_the_same_rules(crawlbase_api: Any) -> None:
    assert fetch(crawlbase_api, f"{SITE}/old-report").reason == "http_404"
    assert fetch(crawlbase_api, f"{SITE}/articles/moved").reason == "redirected_to_homepage"
    assert fetch(crawlbase_api, f"{SITE}/missing-article").reason == "soft_404"


def test_sdk_escalates_520_to_the_js_token(crawlbase_api: Any) -> None:
    url = f"{SITE}/spa-520"
    page = fetch(crawlbase_api, url, crawlbase_js_token=JS_TOKEN)
    assert page.label is None
    assert crawlbase_api.state.calls_for(url) == {"readable": 1, "js-readable": 1}


def test_sdk_escalates_thin_pages_with_javascript_true(crawlbase_api: Any) -> None:
    url = f"{SITE}/app"
    page = fetch(crawlbase_api, url)
    assert page.label is None
    assert crawlbase_api.state.requests[-1]["javascript"] == "true"


def test_sdk_bad_token_raises_auth_error(crawlbase_api: Any) -> None:
    with pytest.raises(CrawlbaseAuthError):
        fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point", crawlbase_token="nope")


def test_sdk_without_token_raises_missing_credential(crawlbase_api: Any) -> None:
    with pytest.raises(MissingCredentialError):
        fetch(crawlbase_api, f"{SITE}/articles/water-boiling-point", crawlbase_token=None)


def test_sdk_rate_limit_is_retried(crawlbase_api: Any) -> None:
    url = f"{SITE}/articles/water-boiling-point"
    crawlbase_api.state.targets[url].api_errors = [429]
    page = fetch(crawlbase_api, url, retry_backoff=0.01)  # the SDK drops Retry-After
    assert page.label is None
    assert crawlbase_api.state.calls_for(url) == {"readable": 2}


def test_sdk_token_never_appears_in_page(crawlbase_api: Any) -> None:
    page = fetch(crawlbase_api, f"{SITE}/old-report")
    assert NORMAL_TOKEN not in page.model_dump_json() and NORMAL_TOKEN not in repr(page)
    assert page.label == Label.unreachable
