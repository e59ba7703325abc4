"""The guard and the quote-first check: DESIGN.md §8, §9."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pytest_citations.guard import (
    closest_passage,
    find_quote,
    guard_judgement,
    normalize,
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
