"""Direct mode (no Crawlbase token) against the fixture website over real HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pytest_citations.fetch import Page, fetch_page
from pytest_citations.fetch import rules as fetch_rules
from pytest_citations.models import Label
from pytest_citations.settings import Settings
from pytest_citations.transport import LiveRecorder


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"fetcher": "direct", "allow_private_hosts": True, "timeout": 5.0}
    values.update(overrides)
    return Settings(**values)


def fetch(url: str, *, private: bool = True, **overrides: Any) -> Page:
    recorder = LiveRecorder(allow_private_hosts=private)
    return asyncio.run(fetch_page(url, settings(**overrides), recorder))


def test_article_is_read_as_markdown_without_boilerplate(website: Any) -> None:
    page = fetch(website.url + "/articles/water-boiling-point")
    assert page.label is None
    assert "Water boils at 100 degrees Celsius at sea level." in page.text
    assert page.text.startswith("# The boiling point of water")
    assert "All rights reserved" not in page.text  # footer dropped
    assert page.original_status == 200
    assert page.final_url == website.url + "/articles/water-boiling-point"


def test_origin_404_is_unreachable_http_404(website: Any) -> None:
    page = fetch(website.url + "/old-report")
    assert (page.label, page.reason, page.original_status) == (Label.unreachable, "http_404", 404)
    assert page.text == ""


def test_origin_410_is_unreachable_http_410(website: Any) -> None:
    page = fetch(website.url + "/retired")
    assert (page.label, page.reason) == (Label.unreachable, "http_410")


def test_deep_link_redirected_to_homepage_is_not_found(website: Any) -> None:
    page = fetch(website.url + "/articles/moved")
    assert (page.label, page.reason) == (Label.not_found, "redirected_to_homepage")
    assert page.final_url == website.url + "/"


def test_redirect_chain_is_followed_and_final_url_recorded(website: Any) -> None:
    page = fetch(website.url + "/redirect/one")
    assert page.label is None
    assert page.final_url == website.url + "/articles/water-boiling-point"
    assert website.state.hits["/redirect/two"] == 1


def test_redirect_loop_is_too_many_redirects(website: Any) -> None:
    page = fetch(website.url + "/loop/a")
    assert (page.label, page.reason) == (Label.unreachable, "too_many_redirects")
    assert website.state.hits["/loop/a"] == 1


def test_more_than_ten_hops_is_too_many_redirects(website: Any) -> None:
    from simulators.website import redirect

    for n in range(12):
        website.state.routes[f"/hop/{n}"] = redirect(f"/hop/{n + 1}")
    page = fetch(website.url + "/hop/0")
    assert (page.label, page.reason) == (Label.unreachable, "too_many_redirects")
    assert website.state.hits["/hop/10"] == 1 and website.state.hits["/hop/11"] == 0


def test_soft_404_template_is_not_found(website: Any) -> None:
    page = fetch(website.url + "/missing-article")
    assert (page.label, page.reason) == (Label.not_found, "soft_404")


def test_long_article_mentioning_404_is_not_a_soft_404(website: Any) -> None:
    page = fetch(website.url + "/articles/http-404-explained")
    assert page.label is None
    assert "404 Not Found" in page.text


def test_javascript_shell_is_empty_in_direct_mode(website: Any) -> None:
    page = fetch(website.url + "/app")
    assert page.label == Label.not_found
    assert page.reason in ("empty_page", "thin_page")


def test_pdf_text_is_extracted_and_judged(website: Any) -> None:
    page = fetch(website.url + "/paper.pdf")
    assert page.label is None
    assert "The mitochondria is the powerhouse of the cell." in page.text


def test_pdf_without_text_is_pdf_unsupported(website: Any) -> None:
    page = fetch(website.url + "/empty.pdf")
    assert (page.label, page.reason) == (Label.not_found, "pdf_unsupported")


def test_image_is_binary_content(website: Any) -> None:
    page = fetch(website.url + "/logo.png")
    assert (page.label, page.reason) == (Label.not_found, "binary_content")


def test_latin1_charset_from_content_type_header(website: Any) -> None:
    page = fetch(website.url + "/latin1")
    assert "Crème brûlée" in page.text
    assert "\ufffd" not in page.text


def test_charset_from_meta_tag_when_header_has_none(website: Any) -> None:
    page = fetch(website.url + "/meta-charset")
    assert "façon “maison”" in page.text


def test_plain_text_is_read_as_is(website: Any) -> None:
    page = fetch(website.url + "/notes.txt")
    assert page.label is None
    assert "Water boils at 100 degrees Celsius at sea level." in page.text


def test_huge_page_is_cut_at_the_cap_without_reading_the_rest(website: Any) -> None:
    page = fetch(website.url + "/huge", max_page_bytes=64 * 1024)
    assert page.label is None
    assert "Water boils at 100 degrees Celsius" in page.text
    assert page.detail is not None and "cut at 65536 bytes" in page.detail
    assert len(page.text.encode()) <= 64 * 1024
    assert website.state.completed["/huge"] == 0  # the 10 MB body was never read in full


def test_paywall_403_is_not_found_http_403(website: Any) -> None:
    page = fetch(website.url + "/paywall")
    assert (page.label, page.reason) == (Label.not_found, "http_403")


def test_transient_503_is_retried_honouring_retry_after(website: Any) -> None:
    page = fetch(website.url + "/flaky")
    assert page.label is None
    assert website.state.hits["/flaky"] == 2


def test_persistent_503_is_unreachable_after_bounded_retries(website: Any) -> None:
    page = fetch(website.url + "/down", retries=2)
    assert (page.label, page.reason) == (Label.unreachable, "http_503")
    assert website.state.hits["/down"] == 3


def test_retry_after_too_long_is_not_waited_for(website: Any) -> None:
    from simulators.website import Route

    website.state.routes["/later"] = Route(status=429, headers={"Retry-After": "3600"})
    page = fetch(website.url + "/later")
    assert (page.label, page.reason) == (Label.unreachable, "http_429")
    assert website.state.hits["/later"] == 1


def test_timeout_is_unreachable_timeout(website: Any) -> None:
    page = fetch(website.url + "/slow", timeout=0.5)
    assert (page.label, page.reason) == (Label.unreachable, "timeout")


def test_connection_refused_is_connect_error() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    page = fetch(f"http://127.0.0.1:{port}/x")
    assert (page.label, page.reason) == (Label.unreachable, "connect_error")


def test_unresolvable_host_is_dns_error() -> None:
    page = fetch("http://no-such-host.invalid/article", private=False)
    assert (page.label, page.reason) == (Label.unreachable, "dns_error")


def test_unresolvable_host_is_dns_error_without_the_guard_too() -> None:
    page = fetch("http://no-such-host.invalid/article", private=True)
    assert (page.label, page.reason) == (Label.unreachable, "dns_error")


def test_loopback_is_blocked_without_connecting(website: Any) -> None:
    page = fetch(website.url + "/articles/water-boiling-point", private=False)
    assert (page.label, page.reason) == (Label.unreachable, "blocked_address")
    assert sum(website.state.hits.values()) == 0


def test_dns_rebinding_is_caught_at_the_connected_address(
    website: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check resolves to a public address; the connection then reaches loopback."""
    from pytest_citations import transport

    async def public_answer(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    monkeypatch.setattr(transport, "_resolve", public_answer)
    url = website.url.replace("127.0.0.1", "localhost") + "/articles/water-boiling-point"
    page = fetch(url, private=False)
    assert (page.label, page.reason) == (Label.unreachable, "blocked_address")
    assert "non-public" in (page.detail or "")
    assert website.state.completed.get("/articles/water-boiling-point", 0) <= 1


def test_redirect_to_a_private_address_is_blocked_on_that_hop(website: Any) -> None:
    """Every hop is address-checked: a public page redirecting inward is refused."""
    import httpx

    from pytest_citations.fetch.direct import follow
    from pytest_citations.transport import LiveTransport, client_for

    class PublicFirstHop(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.live = LiveTransport(allow_private_hosts=False)

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.host == "public.example":
                return httpx.Response(302, headers={"Location": website.url + "/articles/jwt"})
            return await self.live.handle_async_request(request)

    async def go() -> Any:
        async with client_for(PublicFirstHop(), timeout=5) as client:
            return await follow(client, "http://public.example/a", settings())

    page = asyncio.run(go())
    assert isinstance(page, Page)
    assert (page.label, page.reason) == (Label.unreachable, "blocked_address")
    assert website.state.hits["/articles/jwt"] == 0


@pytest.mark.parametrize("url", ["ftp://example.com/file", "http://", "mailto:a@b.c"])
def test_invalid_url_is_unreachable_invalid_url(url: str) -> None:
    page = fetch(url)
    assert (page.label, page.reason) == (Label.unreachable, "invalid_url")


def test_redirect_to_unsupported_scheme_is_invalid_url(website: Any) -> None:
    from simulators.website import redirect

    website.state.routes["/to-ftp"] = redirect("ftp://example.com/file")
    page = fetch(website.url + "/to-ftp")
    assert (page.label, page.reason) == (Label.unreachable, "invalid_url")


def test_thin_page_after_both_extractions_is_thin_page(website: Any) -> None:
    from simulators.website import html_page

    website.state.routes["/stub"] = html_page("Stub", "<p>Coming soon.</p>")
    page = fetch(website.url + "/stub")
    assert (page.label, page.reason) == (Label.not_found, "thin_page")


def test_rules_module_names_its_thresholds() -> None:
    assert fetch_rules.MIN_READABLE_CHARS == 200
    assert fetch_rules.SOFT_404_MAX_CHARS == 800
    assert fetch_rules.MAX_REDIRECTS == 10


def test_dripping_server_hits_the_whole_page_deadline(website: Any) -> None:
    import time

    from simulators.website import Route

    def drip() -> Any:
        yield b"<html><body><p>"
        for _ in range(100):
            time.sleep(0.1)
            yield b"x "

    website.state.routes["/drip"] = Route(body=drip)
    started = time.monotonic()
    page = fetch(website.url + "/drip", timeout=0.3)
    assert (page.label, page.reason) == (Label.unreachable, "timeout")
    assert time.monotonic() - started < 3


#: An article long enough for main-content extraction to keep it.
ARTICLE_HTML = (
    "<html><body><article><p>"
    + "Water boils at 100 degrees. " * 20
    + "</p></article></body></html>"
)


def test_extraction_is_cached_on_disk_keyed_by_the_html(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_citations.fetch import direct

    html = ARTICLE_HTML
    first = direct.extract(html, cache_dir=tmp_path)
    assert "Water boils" in first and len(list(tmp_path.rglob("*.md"))) == 1

    def no_extraction(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("a cached page was extracted again")

    monkeypatch.setattr(direct, "html_to_markdown", no_extraction)
    assert direct.extract(html, cache_dir=tmp_path) == first
    with pytest.raises(AssertionError, match="extracted again"):  # another page: a miss
        direct.extract(html.replace("100", "99"), cache_dir=tmp_path)


def test_a_cached_extraction_is_read_without_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_citations.fetch import direct

    html = ARTICLE_HTML
    assert direct.cached_extraction(html, cache_dir=None) is None
    assert direct.cached_extraction(html, cache_dir=tmp_path) is None  # not extracted yet
    text = direct.extract(html, cache_dir=tmp_path)
    assert direct.cached_extraction(html, cache_dir=tmp_path) == text
    assert direct.cached_extraction(html, readable=False, cache_dir=tmp_path) is None

    async def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cached extraction went to a worker thread")

    monkeypatch.setattr(direct, "run_blocking", no_thread)
    assert asyncio.run(direct._extract(html, cache_dir=tmp_path)) == text
    with pytest.raises(AssertionError, match="worker thread"):  # a miss is extracted off the loop
        asyncio.run(direct._extract(html.replace("100", "99"), cache_dir=tmp_path))
