"""Fuzzing the parsers: hostile input gives a label or a clear error, never a crash.

Complements the property tests already in the suite (``test_fetch_properties``:
arbitrary text and nested tags through ``html_to_markdown``, the RFC splitter on
generated lines; ``test_passages``: no word lost, budget kept; ``test_judge_parse``):
here the inputs are bytes and hostile markup fed through the whole content path
(``direct.page_from``), files of any content through ``load_local``, JSONL files
of any bytes through ``batch.read_records``, journals and embedding-cache files of
any bytes, and cassette files of any content through the cassette recorder.

"Clear error" means an exception of the :class:`~pytest_citations.errors.CitationsError`
family (or, for a cassette that holds a recorded transport failure, the httpx error
it recorded), never a ``TypeError`` from three layers down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_citations.batch import Journal, JournalError, read_records
from pytest_citations.errors import CassetteError, SourceError
from pytest_citations.fetch.direct import Fetched, html_to_markdown, page_from
from pytest_citations.fetch.local import load_local
from pytest_citations.fetch.rules import Page
from pytest_citations.models import Label
from pytest_citations.passages import split_passages
from pytest_citations.retrieval import _decode
from pytest_citations.settings import Settings

SLOW = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
SETTINGS = Settings(max_page_bytes=4096)

# --------------------------------------------------------------------- HTML and content

HOSTILE_TOKENS = [
    "<html>",
    "</html>",
    "<body>",
    "<div>",
    "</div>",
    "<p>",
    "</p>",
    "<article>",
    "</article>",
    "<table><tr><td>",
    "</td></tr></table>",
    "<script>",
    "</script>",
    "<style>",
    "</style>",
    "<!--",
    "-->",
    "<![CDATA[",
    "]]>",
    "<!doctype html>",
    "<?xml version='1.0'?>",
    "&amp;",
    "&#0;",
    "&#x110000;",
    "&#xD800;",
    "&nbsp;",
    "&bogus;",
    "\x00",
    "\ufeff",
    "\u202e",
    "<meta charset='utf-7'>",
    "<img src=x onerror=alert(1)>",
    "<a href='javascript:x'>",
    "<svg><foreignObject><p>",
    "<math><mi>",
    "<template>",
    "<frameset>",
    "<noscript>",
    "<h1>",
    "</h1>",
    "<pre>",
    "</pre>",
    "<ul><li>",
    "<br/>",
    "<" * 5,
    ">" * 5,
    "\r\n",
    "\f",
    "Water boils at 100 degrees Celsius at sea level. ",
]

hostile_html = st.lists(
    st.one_of(st.sampled_from(HOSTILE_TOKENS), st.text(max_size=20)), max_size=60
).map("".join)

deep_nesting = st.builds(
    lambda tag, depth, text: f"<{tag}>" * depth + text + f"</{tag}>" * depth,
    st.sampled_from(["div", "p", "span", "b", "table", "li"]),
    st.integers(min_value=50, max_value=3000),
    st.text(max_size=50),
)

CONTENT_TYPES = [
    "",
    "text/html",
    "text/html; charset=utf-8",
    "text/html; charset=utf-16",
    "text/html; charset=x-bogus",
    "text/plain; charset=latin-1",
    "application/pdf",
    "application/octet-stream",
    "image/png",
    "application/json",
    "application/xhtml+xml",
    "text/html; charset=",
    ";;;",
    "TEXT/HTML; CHARSET=UTF-8",
]


def _check_page(page: Page) -> None:
    assert isinstance(page, Page)
    if page.label is None:
        assert page.text.strip(), "an accepted page has text"
    else:
        assert page.label in (Label.unreachable, Label.not_found)
        assert page.reason
        assert page.text == ""


@SLOW
@given(
    body=st.one_of(
        st.binary(max_size=3000),
        hostile_html.map(lambda s: s.encode("utf-8", "surrogatepass")),
        deep_nesting.map(str.encode),
        st.binary(max_size=200).map(lambda b: b"%PDF-1.4\n" + b),
    ),
    content_type=st.sampled_from(CONTENT_TYPES),
    status=st.sampled_from([200, 203, 206, 301, 404, 410, 418, 429, 451, 500, 503]),
    truncated=st.booleans(),
)
def test_any_response_becomes_a_page_with_text_or_a_label(
    body: bytes, content_type: str, status: int, truncated: bool
) -> None:
    charset = None
    if "charset=" in content_type.lower():
        charset = content_type.lower().split("charset=", 1)[1].strip() or None
    fetched = Fetched(
        status=status,
        url="https://example.com/a/b",
        content_type=content_type,
        charset=charset,
        body=body,
        truncated=truncated,
    )
    _check_page(asyncio.run(page_from("https://example.com/a/b", fetched)))


@SLOW
@given(st.one_of(hostile_html, deep_nesting))
def test_hostile_markup_gives_a_string(html: str) -> None:
    for readable in (True, False):
        text = html_to_markdown(html, readable=readable)
        assert isinstance(text, str)
        assert "\x00" not in text or "\x00" in html


# ----------------------------------------------------------------------------- passages


@given(st.text(), st.integers(min_value=1, max_value=40))
def test_splitting_is_idempotent(text: str, max_words: int) -> None:
    """Passages joined by blank lines split back into the same passages: packing is
    greedy, so no two neighbours can merge the second time."""
    passages = split_passages(text, max_words)
    assert split_passages("\n\n".join(passages), max_words) == passages


# ------------------------------------------------------------------ local files and RFCs

rfc_like = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.from_regex(r"\d{1,2}(\.\d{1,2}){0,3}\.  [A-Za-z ]{1,20}", fullmatch=True),
        st.just("Request for Comments: 7519"),
        st.just("Jones, et al.               Standards Track                    [Page 3]"),
        st.just("RFC 7519                 JSON Web Token (JWT)                  May 2015"),
        st.just("Appendix A.  Examples"),
        st.just("\f"),
        st.just(""),
    ),
    max_size=50,
)


@SLOW
@given(
    content=st.one_of(
        st.binary(max_size=6000),
        st.tuples(rfc_like, st.sampled_from(["\n", "\r\n", "\r", "\n\f"])).map(
            lambda pair: pair[1].join(pair[0]).encode("utf-8", "surrogatepass")
        ),
    ),
    suffix=st.sampled_from([".txt", ".md", ".html", ".htm", ".pdf", ""]),
)
def test_any_local_file_loads_or_raises_source_error(
    tmp_path_factory: pytest.TempPathFactory, content: bytes, suffix: str
) -> None:
    path = tmp_path_factory.mktemp("doc") / f"doc{suffix}"
    path.write_bytes(content)
    try:
        page = load_local(str(path), SETTINGS)
    except SourceError:
        return
    assert page.label is None and isinstance(page.text, str)
    for number, section in (page.sections or {}).items():
        assert all(part.isdigit() for part in number.split("."))
        assert section in page.text


def test_unreadable_local_sources_raise_source_error(tmp_path: Path) -> None:
    for source in (str(tmp_path), str(tmp_path / "missing.txt"), "file://otherhost/x.txt"):
        with pytest.raises(SourceError):
            load_local(source, SETTINGS)


# ------------------------------------------------------------------------ batch JSONL

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
record_like = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.none()),
        "claim": st.one_of(st.text(max_size=20), json_values),
        "urls": st.one_of(
            st.lists(st.text(max_size=15), max_size=3), st.text(max_size=15), json_values
        ),
        "quote": st.one_of(st.none(), st.text(max_size=10), st.integers()),
        "section": st.one_of(st.none(), st.text(max_size=5), st.lists(st.integers())),
    },
)
jsonl_line = st.one_of(
    record_like.map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s),
)


@SLOW
@given(
    st.one_of(
        st.lists(jsonl_line, max_size=15).map(
            lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass")
        ),
        st.binary(max_size=800),
    )
)
def test_any_jsonl_file_reads_into_records_and_numbered_problems(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("in") / "in.jsonl"
    path.write_bytes(data)
    records, problems = read_records(path)
    lines = [r.line for r in records] + [p.line for p in problems]
    assert len(lines) == len(set(lines)), "a line is a record or a problem, once"
    assert len({r.id for r in records}) == len(records)
    text = data.decode("utf-8-sig", errors="replace")
    physical = re.split(r"\r\n|\r|\n", text)  # what a text-mode file iterates over
    non_blank = {n for n, line in enumerate(physical, 1) if line.strip()}
    assert set(lines) == non_blank
    for record in records:
        assert record.claim.strip() and record.urls and all(u.strip() for u in record.urls)
    for problem in problems:
        assert str(problem).startswith(f"line {problem.line}: ")


@SLOW
@given(st.binary(max_size=600))
def test_any_journal_file_reads_or_raises_journal_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("j") / "report.csv.journal.jsonl"
    header = json.dumps({"format": "pytest-citations batch journal", "version": 1, "run_id": "r"})
    for content in (data, header.encode() + b"\n" + data):
        path.write_bytes(content)
        try:
            state = Journal.read(path)
        except JournalError:
            continue
        assert all(isinstance(entry, dict) for entry in state.entries)


@given(st.binary(max_size=300))
@example(b"citations-embedding-v1 float32le 1 AADAfw==")  # NaN
@example(b"citations-embedding-v1 float32le 0 ")
def test_any_embedding_cache_file_decodes_to_a_finite_vector_or_none(data: bytes) -> None:
    vector = _decode(data)
    assert vector is None or (vector and all(math.isfinite(x) for x in vector))


# ----------------------------------------------------------------------------- cassettes

cassette_texts = st.one_of(
    st.binary(max_size=400),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(
        lambda interactions: json.dumps({"version": 1, "interactions": interactions}).encode(),
        st.lists(
            st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {"request": json_values, "response": json_values},
                ),
            ),
            max_size=3,
        ),
    ),
)


@SLOW
@given(cassette_texts)
@example(b"{{{ not yaml")
@example(b"interactions: 5\n")
@example(b"interactions:\n- request: 1\n")
@example(
    b"interactions:\n- request: {method: GET, uri: 'https://example.com/page', body: null,"
    b" headers: {}}\n  response: {status: {code: OK}, headers: [], body: 3}\n"
)
@example(
    b"interactions:\n- request: {method: GET, uri: 'https://example.com/page', body: null,"
    b" headers: {}}\n  response: {status: {code: 200}, headers: [], body: {}}\n"
)
def test_any_cassette_file_replays_or_raises_a_cassette_error(
    tmp_path_factory: pytest.TempPathFactory, content: bytes
) -> None:
    from pytest_citations.cassettes import CassetteRecorder, cassette_path

    directory = tmp_path_factory.mktemp("cassettes")
    key = {"source": "https://example.com/page", "fetcher": "direct"}
    path = cassette_path(directory, "page", key)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    recorder = CassetteRecorder(directory, record_mode="none")

    async def one_request() -> None:
        async with (
            recorder.session("page", key) as transport,
            httpx.AsyncClient(transport=transport) as client,
        ):
            await client.get("https://example.com/page")

    with contextlib.suppress(CassetteError, httpx.TransportError):
        asyncio.run(one_request())
