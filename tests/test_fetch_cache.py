"""PageCache: each distinct (source, fetcher) is fetched once per process."""

from __future__ import annotations

import asyncio
from typing import Any

from pytest_citations.fetch import PageCache
from pytest_citations.settings import Settings
from pytest_citations.transport import LiveRecorder


def direct() -> Settings:
    return Settings(fetcher="direct", allow_private_hosts=True, timeout=5.0)


def test_concurrent_citations_of_one_page_fetch_it_once(website: Any) -> None:
    cache = PageCache()
    url = website.url + "/articles/water-boiling-point"
    recorder = LiveRecorder(allow_private_hosts=True)

    async def many() -> list[Any]:
        return await asyncio.gather(*(cache.get(url, direct(), recorder) for _ in range(8)))

    pages = asyncio.run(many())
    assert len({id(page) for page in pages}) == 1
    assert website.state.hits["/articles/water-boiling-point"] == 1
    assert cache.fetches == 1


def test_cache_works_across_separate_event_loops(website: Any) -> None:
    cache = PageCache()
    url = website.url + "/articles/jwt"
    recorder = LiveRecorder(allow_private_hosts=True)
    first = asyncio.run(cache.get(url, direct(), recorder))
    second = asyncio.run(cache.get(url, direct(), recorder))
    assert first is second
    assert website.state.hits["/articles/jwt"] == 1


def test_different_fetchers_are_cached_separately(website: Any, crawlbase_api: Any) -> None:
    from simulators.crawlbase import NORMAL_TOKEN

    cache = PageCache()
    url = website.url + "/articles/jwt"
    recorder = LiveRecorder(allow_private_hosts=True)
    via_crawlbase = Settings(
        crawlbase_api_url=crawlbase_api.url + "/", crawlbase_token=NORMAL_TOKEN
    )
    asyncio.run(cache.get(url, direct(), recorder))
    asyncio.run(cache.get(url, via_crawlbase, recorder))
    assert cache.fetches == 2 and len(cache) == 2


def test_failed_fetch_is_not_cached(tmp_path: Any) -> None:
    import pytest

    from pytest_citations.errors import SourceError

    cache = PageCache()
    path = tmp_path / "later.txt"
    with pytest.raises(SourceError):
        asyncio.run(cache.get(str(path), direct(), LiveRecorder()))
    path.write_text("now it exists", encoding="utf-8")
    page = asyncio.run(cache.get(str(path), direct(), LiveRecorder()))
    assert page.text == "now it exists"


def test_cancelled_caller_does_not_cancel_the_shared_fetch(website: Any) -> None:
    from simulators.website import Route

    website.state.routes["/slowish"] = Route(body="<p>" + "evidence " * 60 + "</p>", delay=0.3)
    cache = PageCache()
    url = website.url + "/slowish"
    recorder = LiveRecorder(allow_private_hosts=True)

    async def scenario() -> Any:
        impatient = asyncio.ensure_future(cache.get(url, direct(), recorder))
        patient = asyncio.ensure_future(cache.get(url, direct(), recorder))
        await asyncio.sleep(0.05)
        impatient.cancel()
        return await patient

    page = asyncio.run(scenario())
    assert "evidence" in page.text
    assert website.state.hits["/slowish"] == 1
