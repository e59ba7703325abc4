"""Property tests: the RFC splitter and the HTML→Markdown conversion never crash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_citations.fetch import rules
from pytest_citations.fetch.direct import decode_body, html_to_markdown
from pytest_citations.fetch.local import is_rfc_layout, load_rfc, split_sections

rfc_lines = st.lists(
    st.one_of(
        st.text(max_size=60),
        st.builds(
            lambda n, t: f"{n}.  {t}",
            st.from_regex(r"\d{1,2}(\.\d{1,2}){0,3}", fullmatch=True),
            st.text(min_size=1, max_size=20).filter(lambda s: s.strip() and "\n" not in s),
        ),
        st.just("Author                   Informational                   [Page 3]"),
        st.just("RFC 1234                 Some Protocol                   June 1999"),
        st.just("Appendix B.  Extra"),
        st.just(""),
    ),
    max_size=40,
)


@given(rfc_lines)
def test_splitter_sections_are_slices_of_the_source(lines: list[str]) -> None:
    source = load_rfc("\n".join(lines))
    sections = split_sections(source)
    for number, text in sections.items():
        assert text in source
        assert text.startswith(number + ".  ")
        assert all(part.isdigit() for part in number.split("."))


@given(st.text(max_size=500))
def test_rfc_detection_and_loading_never_crash(text: str) -> None:
    is_rfc_layout(text)
    assert "\n\n\n" not in load_rfc(text)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_html_to_markdown_never_crashes_on_arbitrary_text(text: str) -> None:
    assert isinstance(html_to_markdown(text), str)
    assert isinstance(html_to_markdown(text, readable=False), str)


tags = st.sampled_from(["p", "div", "article", "h1", "li", "ul", "table", "td", "script", "nav"])
html_fragments = st.recursive(
    st.text(max_size=30),
    lambda inner: (
        st.builds(lambda t, body: f"<{t}>{body}</{t}>", tags, inner)
        | st.lists(inner, max_size=4).map("".join)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(html_fragments)
def test_html_to_markdown_never_crashes_on_nested_markup(fragment: str) -> None:
    html = f"<html><body>{fragment}</body></html>"
    assert isinstance(html_to_markdown(html), str)


@given(
    st.binary(max_size=300), st.one_of(st.none(), st.sampled_from(["utf-8", "latin-1", "bogus"]))
)
def test_decoding_never_raises(body: bytes, charset: str | None) -> None:
    assert isinstance(decode_body(body, charset, html=True), str)


@given(st.text(max_size=1200))
def test_soft_404_never_fires_on_long_text(text: str) -> None:
    if rules.readable_chars(text) >= rules.SOFT_404_MAX_CHARS:
        assert not rules.is_soft_404(text)
