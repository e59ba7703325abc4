"""Verdict models: the shapes every door shares."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pytest_citations.models import CitationVerdict, ClaimVerdict, Label


def _claim(label: str = "supported") -> ClaimVerdict:
    return ClaimVerdict(
        claim="Water boils at 100 degrees Celsius at sea level.",
        label=Label(label),
        citations=[
            CitationVerdict(
                url="https://example.com/articles/water-boiling-point",
                label=Label.supported,
                evidence_quote="Water boils at 100 degrees Celsius at sea level.",
                confidence=0.96,
                original_status=200,
                rid="rid-boil",
            )
        ],
    )


def test_a_claim_verdict_compares_equal_to_its_label_string() -> None:
    verdict = _claim()
    assert verdict == "supported"
    assert verdict != "contradicted"
    assert verdict == Label.supported


def test_a_claim_verdict_is_not_equal_to_other_types() -> None:
    assert _claim() != 1


def test_the_seed_json_shape_uses_overall() -> None:
    payload = _claim().seed_json()
    assert payload["overall"] == "supported"
    assert list(payload["citations"][0]) == [
        "url",
        "label",
        "evidence_quote",
        "confidence",
        "final_url",
        "original_status",
        "rid",
        "reason",
        "needs_review",
    ]


def test_confidence_outside_zero_one_is_rejected() -> None:
    with pytest.raises(ValidationError):
        CitationVerdict(url="u", label=Label.supported, confidence=1.5)


def test_label_is_a_string_enum() -> None:
    assert Label("fabricated") == "fabricated"
    assert str(Label.not_found) == "not_found"
