"""The guard and the quote-first check: DESIGN.md §8, §9."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pytest_citations.guard import (
    closest_passage,
    find_quote,
    guard_judgement,
    normalize,
    passages_holding,
    quote_in_passages,
)
from pytest_citations.models import Label

PASSAGES = ["Water boils at 100 degrees Celsius at sea level.", "Ice melts at 0 degrees."]


def test_normalize_folds_curly_quotes_and_collapses_whitespace() -> None:
    assert normalize("  “exp”\n  is ‘OPTIONAL’\t ") == "\"exp\" is 'OPTIONAL'"


def test_a_quote_matches_across_line_wraps() -> None:
    assert quote_in_passages("boils at 100\n   degrees", PASSAGES)


def test_an_empty_quote_is_never_in_the_passages() -> None:
    assert not quote_in_passages("   ", PASSAGES)


def test_supported_with_a_real_quote_stands() -> None:
    quote = "Water boils at 100 degrees Celsius"
    assert guard_judgement("supported", quote, 0.96, PASSAGES) == (
        Label.supported,
        quote,
        0.96,
        None,
    )


def test_contradicted_with_an_invented_quote_is_downgraded() -> None:
    assert guard_judgement("contradicted", "Water boils at 50 degrees", 0.99, PASSAGES) == (
        Label.not_found,
        None,
        0.0,
        "evidence_quote_not_in_source",
    )


def test_supported_without_a_quote_is_downgraded() -> None:
    label, quote, confidence, reason = guard_judgement("supported", None, 0.9, PASSAGES)
    assert (label, quote, confidence, reason) == (
        Label.not_found,
        None,
        0.0,
        "evidence_quote_not_in_source",
    )


def test_not_found_with_a_bad_quote_loses_quote_and_confidence() -> None:
    assert guard_judgement("not_found", "made up", 0.7, PASSAGES) == (
        Label.not_found,
        None,
        0.0,
        "evidence_quote_not_in_source",
    )


def test_not_found_without_a_quote_keeps_its_confidence() -> None:
    assert guard_judgement("not_found", None, 0.27, PASSAGES) == (Label.not_found, None, 0.27, None)


def test_find_quote_searches_sections_in_numeric_order() -> None:
    sections = {"10": "the quote", "4.1.3": "the quote", "4.1": "other", "2": "nothing"}
    assert find_quote("the   quote", sections) == "4.1.3"


def test_find_quote_returns_none_when_absent() -> None:
    assert find_quote("never written", {"1": "text"}) is None


def test_closest_passage_scores_a_truncated_quote_high_and_an_invented_one_low() -> None:
    passages = [
        "The exp claim identifies the expiration time on or after which the JWT MUST NOT "
        "be accepted for processing.",
        "The iat claim identifies the time at which the JWT was issued.",
    ]
    near, truncated = closest_passage(
        "identifies the expiration time on or after which the JWT MUST NOT be used", passages
    )
    _, invented = closest_passage("signatures must be reported to the IETF registry", passages)
    assert near == passages[0]
    assert truncated > 0.7
    assert invented < 0.3


@given(st.text(), st.lists(st.text(), max_size=4))
def test_guard_never_keeps_a_quote_that_is_not_in_the_passages(
    quote: str, passages: list[str]
) -> None:
    for label in ("supported", "contradicted", "not_found"):
        result_label, kept, confidence, _ = guard_judgement(label, quote, 0.5, passages)
        if kept is not None:
            assert quote_in_passages(kept, passages)
        else:
            assert result_label is Label.not_found or label == "not_found"
        assert 0.0 <= confidence <= 1.0


@given(st.text())
def test_normalize_is_idempotent(text: str) -> None:
    assert normalize(normalize(text)) == normalize(text)


@given(st.text(min_size=1), st.text(), st.text())
def test_any_substring_of_a_passage_is_found(inner: str, before: str, after: str) -> None:
    passage = before + inner + after
    if normalize(inner):
        assert quote_in_passages(inner, [passage]) == (normalize(inner) in normalize(passage))


def test_markdown_emphasis_and_links_do_not_hide_a_verbatim_quote() -> None:
    page = ["Pure water boils at **100 degrees Celsius** at [sea level](https://x.test/s)."]
    assert quote_in_passages("Pure water boils at 100 degrees Celsius at sea level.", page)


def test_a_lone_asterisk_is_kept() -> None:
    assert normalize("a * b") == "a * b"
    assert not quote_in_passages("a b", ["a * b"])


def test_passages_holding_returns_the_one_passage_with_the_quote() -> None:
    assert passages_holding("Ice melts", PASSAGES) == PASSAGES[1]


def test_passages_holding_joins_every_passage_a_long_quote_spans() -> None:
    passages = ["one two three", "four five six", "seven eight nine", "ten"]
    assert passages_holding("three four five six seven", passages) == (
        "one two three four five six seven eight nine"
    )


def test_passages_holding_is_none_for_an_absent_or_empty_quote() -> None:
    assert passages_holding("eleven", ["one", "two"]) is None
    assert passages_holding("  ", ["one"]) is None


@given(st.lists(st.text(min_size=1), min_size=1, max_size=5), st.data())
def test_any_span_of_the_joined_passages_is_held(passages: list[str], data: st.DataObject) -> None:
    joined = " ".join(normalize(p) for p in passages)
    if not joined.strip():
        return
    start = data.draw(st.integers(0, len(joined) - 1))
    end = data.draw(st.integers(start + 1, len(joined)))
    quote = joined[start:end]
    if not normalize(quote) or normalize(quote) != quote.strip():
        return
    held = passages_holding(quote, passages)
    assert held is not None and normalize(quote) in normalize(held)
