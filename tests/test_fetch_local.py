"""Local documents and the RFC-layout section splitter (seed 003)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_citations.errors import SourceError
from pytest_citations.fetch import Page, fetch_page, fetcher_for
from pytest_citations.fetch.local import is_rfc_layout, load_rfc, split_sections
from pytest_citations.settings import Settings
from pytest_citations.transport import LiveRecorder

RFC7519 = Path("/work/shared/data/rfc7519.txt")
needs_rfc = pytest.mark.skipif(not RFC7519.exists(), reason="shared RFC 7519 data not present")


def fetch(source: str, **overrides: object) -> Page:
    return asyncio.run(fetch_page(source, Settings(**overrides), LiveRecorder()))  # type: ignore[arg-type]


@needs_rfc
def test_rfc7519_matches_seed_003_counts() -> None:
    page = fetch(str(RFC7519))
    assert len(page.text) == 58_365
    assert page.sections is not None and len(page.sections) == 45


@needs_rfc
def test_rfc7519_section_sizes_match_seed_003() -> None:
    sections = fetch(str(RFC7519)).sections
    assert sections is not None
    assert len(sections["4.1.3"]) == 761
    assert len(sections["4.1.4"]) == 529
    assert len(sections["4.1.6"]) == 270
    assert sections["4.1.4"].startswith('4.1.4.  "exp" (Expiration Time) Claim')


@needs_rfc
def test_rfc_page_headers_and_footers_are_removed() -> None:
    text = fetch(str(RFC7519)).text
    assert "[Page " not in text
    assert "RFC 7519                  JSON Web Token (JWT)                  May 2015" not in text


@needs_rfc
def test_file_url_reads_the_same_page() -> None:
    by_path = fetch(str(RFC7519))
    by_uri = fetch(RFC7519.resolve().as_uri())
    assert by_uri.text == by_path.text
    assert by_uri.final_url == RFC7519.resolve().as_uri()


def test_local_page_has_no_label_no_status_and_a_file_uri(tmp_path: Path) -> None:
    doc = tmp_path / "notes.txt"
    doc.write_text("Water boils at 100 degrees Celsius at sea level.\n", encoding="utf-8")
    page = fetch(str(doc))
    assert page.label is None and page.original_status is None and page.rid is None
    assert page.final_url == doc.resolve().as_uri()
    assert page.sections is None
    assert page.source == str(doc)


def test_plain_document_is_not_split_into_sections(tmp_path: Path) -> None:
    doc = tmp_path / "plain.txt"
    doc.write_text("1.  Not an RFC\n\nJust a numbered list.\n", encoding="utf-8")
    assert fetch(str(doc)).sections is None


def test_invalid_utf8_is_replaced_not_fatal(tmp_path: Path) -> None:
    doc = tmp_path / "bad.txt"
    doc.write_bytes(b"caf\xe9 au lait\n")
    assert fetch(str(doc)).text == "caf\ufffd au lait\n"


def test_missing_file_raises_source_error_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(SourceError, match=str(missing)):
        fetch(str(missing))


def test_directory_raises_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="directory"):
        fetch(str(tmp_path))


def test_empty_source_raises_source_error() -> None:
    with pytest.raises(SourceError):
        fetch("   ")


def test_local_html_is_converted_to_markdown(tmp_path: Path) -> None:
    doc = tmp_path / "page.html"
    doc.write_text(
        "<html><body><nav>Home</nav><article><h1>Boiling</h1><p>Water boils at 100 degrees "
        "Celsius at sea level, which is the standard reference point of the scale.</p>"
        "</article></body></html>",
        encoding="utf-8",
    )
    assert "Water boils at 100 degrees" in fetch(str(doc)).text


def test_local_sources_use_the_local_fetcher(tmp_path: Path) -> None:
    settings = Settings(crawlbase_token="x")  # type: ignore[arg-type]
    assert fetcher_for(str(tmp_path / "a.txt"), settings) == "local"
    assert fetcher_for("file:///tmp/a.txt", settings) == "local"
    assert fetcher_for("https://example.com/a", settings) == "crawlbase"


def test_generic_rfc_headers_and_footers_are_removed() -> None:
    text = (
        "Internet Engineering Task Force (IETF)                       A. Author\n"
        "Request for Comments: 9999                                   Example\n\n"
        "1.  Introduction\n\n   Some text.\n\n"
        "Author                       Informational                     [Page 1]\n"
        "\fRFC 9999                     A Test Protocol                 March 2021\n\n"
        "1.1.  Scope\n\n   More text.\n"
    )
    assert is_rfc_layout(text)
    clean = load_rfc(text)
    assert "[Page 1]" not in clean and "March 2021" not in clean
    assert split_sections(clean) == {
        "1": "1.  Introduction\n\n   Some text.",
        "1.1": "1.1.  Scope\n\n   More text.",
    }


def test_appendix_header_ends_the_section_before_it() -> None:
    source = "1.  One\n\n   a\n\nAppendix A.  Extra\n\n   b\n"
    assert split_sections(source) == {"1": "1.  One\n\n   a"}
