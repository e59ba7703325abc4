"""The shared page rules, one behaviour per test (no network)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_citations.fetch import rules
from pytest_citations.models import Label


def test_thin_is_under_200_non_whitespace_characters() -> None:
    assert rules.is_thin("a " * 199)
    assert not rules.is_thin("a" * 200)
    assert rules.is_thin(" \n\t" * 500)


@pytest.mark.parametrize(
    "text",
    [
        "# Page not found\n\nSorry, the page you are looking for does not exist.",
        "404 - Page Not Found. Return home.",
        "Error 404",
        "The requested URL was not found on this server.",
        "Oops! We can't find the page you're looking for.",
        "Cette page n'existe pas.",
        "This article is no longer available.",
    ],
)
def test_short_not_found_templates_are_soft_404(text: str) -> None:
    assert rules.is_soft_404(text)


def test_long_article_mentioning_404_is_not_soft_404() -> None:
    article = " ".join(["A 404 Not Found page means the page does not exist."] * 30)
    assert rules.readable_chars(article) >= 800
    assert not rules.is_soft_404(article)


def test_short_ordinary_page_is_not_soft_404() -> None:
    assert not rules.is_soft_404("Water boils at 100 degrees Celsius at sea level.")


def test_homepage_redirect_needs_a_deep_link_landing_on_root() -> None:
    assert rules.is_homepage_redirect("https://a.com/x/y", "https://a.com/")
    assert rules.is_homepage_redirect("https://a.com/x/", "https://a.com")
    assert not rules.is_homepage_redirect("https://a.com/", "https://a.com/")
    assert not rules.is_homepage_redirect("https://a.com/x", "https://a.com/y")
    assert not rules.is_homepage_redirect("https://a.com/x", None)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, None),
        (None, None),
        (404, (Label.unreachable, "http_404")),
        (410, (Label.unreachable, "http_410")),
        (503, (Label.unreachable, "http_503")),
        (429, (Label.unreachable, "http_429")),
        (403, (Label.not_found, "http_403")),
        (400, (Label.not_found, "http_400")),
    ],
)
def test_status_outcome(status: int | None, expected: object) -> None:
    assert rules.status_outcome(status) == expected


def test_status_rule_wins_over_homepage_and_soft_404() -> None:
    page = rules.check_page(
        "u",
        "https://a.com/x",
        text="Page not found",
        final_url="https://a.com/",
        original_status=404,
    )
    assert page is not None and page.reason == "http_404"


def test_retry_after_seconds_and_dates_are_honoured() -> None:
    assert rules.retry_delay("2", 0, 0.5) == 2.0
    assert rules.retry_delay("3600", 0, 0.5) is None
    assert rules.retry_delay(None, 2, 0.5) == 0.5 * 4
    assert rules.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert rules.parse_retry_after("soon") is None


def test_page_is_frozen() -> None:
    from pydantic import ValidationError

    page = rules.Page(source="s")
    with pytest.raises(ValidationError):
        page.text = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"abc", b"def"], (b"abc", True)),  # a chunk ends exactly at the cap, more follows
        ([b"abc"], (b"abc", False)),  # exactly the cap, nothing more
        ([b"ab", b"cd"], (b"abc", True)),  # the cap falls inside a chunk
        ([b"ab"], (b"ab", False)),
    ],
)
def test_read_capped_reads_one_stream_once(chunks: list[bytes], expected: Any) -> None:
    import httpx

    from pytest_citations.fetch.rules import read_capped

    async def body() -> Any:
        for chunk in chunks:
            yield chunk

    assert asyncio.run(read_capped(httpx.Response(200, content=body()), 3)) == expected
