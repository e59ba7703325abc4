"""Claim aggregation and precision: DESIGN.md §3, §4."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pytest_citations.aggregate import Precision, aggregate
from pytest_citations.models import Label

LABELS = st.sampled_from(list(Label))


def test_one_contradiction_outweighs_every_support() -> None:
    assert aggregate(["supported", "supported", "contradicted"]) is Label.contradicted


def test_any_support_carries_the_claim_over_dead_links() -> None:
    assert aggregate(["unreachable", "supported"]) is Label.supported


def test_unreachable_only_when_every_citation_is() -> None:
    assert aggregate(["unreachable", "unreachable"]) is Label.unreachable
    assert aggregate(["unreachable", "not_found"]) is Label.not_found


def test_fabricated_counts_as_not_found_for_the_claim() -> None:
    assert aggregate(["fabricated", "unreachable"]) is Label.not_found


def test_an_empty_list_is_not_found() -> None:
    assert aggregate([]) is Label.not_found


def test_seed_000_batch_prints_its_exact_lines() -> None:
    # The seed's nine-citation fixture: 2 supported, 3 unreachable, 4 others.
    labels = (
        ["supported"] * 2
        + ["unreachable"] * 3
        + ["not_found", "contradicted", "not_found", "fabricated"]
    )
    precision = Precision.from_labels(labels)
    assert precision.lines() == [
        "citation_precision=0.2222 (2/9)",
        "reachable_precision=0.3333 (2/6)",
    ]


def test_reachable_precision_is_none_when_nothing_was_reachable() -> None:
    precision = Precision.from_labels(["unreachable"])
    assert precision.reachable_precision is None
    assert precision.lines()[1] == "reachable_precision=n/a (0/0)"


@given(st.lists(LABELS))
def test_aggregate_follows_the_fixed_rule(labels: list[Label]) -> None:
    result = aggregate(labels)
    if Label.contradicted in labels:
        assert result is Label.contradicted
    elif Label.supported in labels:
        assert result is Label.supported
    elif labels and set(labels) == {Label.unreachable}:
        assert result is Label.unreachable
    else:
        assert result is Label.not_found


@given(st.lists(LABELS))
def test_aggregate_ignores_order(labels: list[Label]) -> None:
    assert aggregate(labels) is aggregate(reversed(labels))


@given(st.lists(LABELS, min_size=1))
def test_precisions_are_fractions_and_reachable_is_never_lower(labels: list[Label]) -> None:
    precision = Precision.from_labels(labels)
    assert precision.citation_precision is not None
    assert 0.0 <= precision.citation_precision <= 1.0
    if precision.reachable_precision is not None:
        assert precision.reachable_precision >= precision.citation_precision
