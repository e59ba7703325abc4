"""Seed 000's story: the page a citation points to is fetched and compared with the claim.

Every page is on https://example.com and was fetched through the Crawlbase
Crawling API (``format=md``, ``md_readability=true``, ``store=true``). The five
tests below are the five claims of the seed's batch; together they are its nine
citations, so ``pytest examples/boiling_point`` ends with the seed's lines::

    citation_precision=0.2222 (2/9)
    reachable_precision=0.3333 (2/6)

Dead links, homepage redirects, soft 404s, the guard on the judge's quote,
aggregation and precision are decided by the real pipeline on every run; only
the HTTP answers come from the committed cassettes (see cassettes/README.md).
"""

from __future__ import annotations

from typing import Any

from pytest_citations import Label, Precision

SITE = "https://example.com"
BOILING = f"{SITE}/articles/water-boiling-point"
BOILING_SENTENCE = "Water boils at 100 degrees Celsius at sea level."

SUPPORTED_CLAIM = "Water boils at 100 degrees Celsius at sea level."
WRONG_CLAIM = "Water boils at 50 degrees Celsius at sea level."
ALTITUDE_CLAIM = "Water boils at a lower temperature at higher altitudes."
EVEREST_CLAIM = "On the summit of Mount Everest water boils at about 70 degrees Celsius."
SALT_CLAIM = "Adding salt raises the boiling point of water."

#: The batch: five claims as an LLM cited them, nine claim-URL pairs.
BATCH: list[tuple[str, list[str]]] = [
    (SUPPORTED_CLAIM, [BOILING, f"{SITE}/old-report"]),
    (WRONG_CLAIM, [BOILING, f"{SITE}/retired"]),
    (ALTITUDE_CLAIM, [f"{SITE}/articles/moved", f"{SITE}/short-note"]),
    (EVEREST_CLAIM, [f"{SITE}/missing-article", f"{SITE}/old-report"]),
    (SALT_CLAIM, [BOILING]),
]


def test_a_dead_link_does_not_sink_a_supported_claim(verify_citation: Any) -> None:
    """The seed's dry run: one citation supports the claim, the other is gone (404)."""
    verdict = verify_citation(SUPPORTED_CLAIM, [BOILING, f"{SITE}/old-report"])
    assert verdict == "supported"
    live, dead = verdict.citations
    assert live.label is Label.supported
    assert live.evidence_quote == BOILING_SENTENCE
    assert (live.final_url, live.original_status) == (BOILING, 200)
    assert live.rid  # Crawlbase's storage id, kept for the audit; the token never is
    assert (dead.label, dead.reason, dead.original_status, dead.confidence) == (
        Label.unreachable,
        "http_404",
        404,
        1.0,
    )
    assert dead.evidence_quote is None  # a dead link never reaches the judge


def test_a_live_page_that_says_otherwise_contradicts_the_claim(verify_citation: Any) -> None:
    """The opening of seed 000: the link works, and the page says 100 degrees, not 50."""
    verdict = verify_citation(WRONG_CLAIM, [BOILING, f"{SITE}/retired"])
    assert verdict == "contradicted"  # one contradiction outweighs everything else
    page, gone = verdict.citations
    assert page.label is Label.contradicted
    assert page.evidence_quote == BOILING_SENTENCE  # the quote is really on the page
    assert (gone.label, gone.reason) == (Label.unreachable, "http_410")


def test_a_deep_link_that_lands_on_the_homepage_is_not_evidence(verify_citation: Any) -> None:
    """A deep link redirected to ``/`` is not_found without asking the judge; the second
    page is thin after readability, so it is fetched again without it, and supports."""
    verdict = verify_citation(ALTITUDE_CLAIM, [f"{SITE}/articles/moved", f"{SITE}/short-note"])
    assert verdict == "supported"
    moved, note = verdict.citations
    assert (moved.label, moved.reason, moved.final_url) == (
        Label.not_found,
        "redirected_to_homepage",
        f"{SITE}/",
    )
    assert note.label is Label.supported
    assert note.evidence_quote and "lower temperature" in note.evidence_quote


def test_a_soft_404_and_a_dead_link_leave_a_true_claim_unsupported(verify_citation: Any) -> None:
    """A 200 page that only says "page not found" is a soft 404; with a 404 beside it the
    claim is not_found (unreachable needs every citation to be gone)."""
    verdict = verify_citation(EVEREST_CLAIM, [f"{SITE}/missing-article", f"{SITE}/old-report"])
    assert verdict == "not_found"
    assert [(c.label.value, c.reason) for c in verdict.citations] == [
        ("not_found", "soft_404"),
        ("unreachable", "http_404"),
    ]


def test_a_judge_quote_that_is_not_on_the_page_is_thrown_out(verify_citation: Any) -> None:
    """The judge answers supported with a sentence the page does not contain (see
    judge_script.json); the guard downgrades it to not_found with confidence 0."""
    verdict = verify_citation(SALT_CLAIM, [BOILING])
    assert verdict == "not_found"
    (citation,) = verdict.citations
    assert (citation.reason, citation.confidence, citation.needs_review) == (
        "evidence_quote_not_in_source",
        0.0,
        True,
    )
    assert citation.evidence_quote is None


def test_batch_precision(citations_verifier: Any) -> None:
    """Precision over the batch (seed 000: two of nine supported, three unreachable).

    The tests above verified the same claims through ``verify_citation``, which is
    what the session summary counts; this one uses the session's Verifier directly
    (pages already fetched, judge answers replayed) so nothing is counted twice.
    """
    verdicts = [citations_verifier.verify(claim, urls) for claim, urls in BATCH]
    citations = [citation for verdict in verdicts for citation in verdict.citations]
    lines = Precision.from_verdicts(citations).lines()
    print("\n".join(lines))
    assert lines == [
        "citation_precision=0.2222 (2/9)",
        "reachable_precision=0.3333 (2/6)",
    ]
    assert [v.label.value for v in verdicts] == [
        "supported",
        "contradicted",
        "supported",
        "not_found",
        "not_found",
    ]
