"""The verdict shapes every door (library, pytest plugin, batch, service) shares.

They are pydantic models because they cross boundaries: JSON reports, cassettes,
the ``/verify`` service and the audit index all read and write them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Default confidence gate (seed 003's ``AUTO_ACCEPT``): a verdict below it is
#: sent to a human. Start high and lower it as the judge earns trust.
DEFAULT_AUTO_ACCEPT = 0.8


class Label(StrEnum):
    """The five outcomes of one citation (DESIGN.md §2)."""

    supported = "supported"
    contradicted = "contradicted"
    not_found = "not_found"
    unreachable = "unreachable"
    fabricated = "fabricated"


class Reason(StrEnum):
    """Machine-readable reasons attached to a verdict.

    The first seven are the exact strings of DESIGN.md §2; the rest name the
    fetch, judge and input failures this implementation can meet. A status the
    list does not name is reported as ``http_<status>``.
    """

    http_404 = "http_404"
    http_410 = "http_410"
    redirected_to_homepage = "redirected_to_homepage"
    soft_404 = "soft_404"
    pdf_unsupported = "pdf_unsupported"
    evidence_quote_not_in_source = "evidence_quote_not_in_source"
    quote_not_in_source = "quote_not_in_source"
    # fetch
    blocked_address = "blocked_address"
    dns_error = "dns_error"
    connect_error = "connect_error"
    timeout = "timeout"
    invalid_url = "invalid_url"
    too_many_redirects = "too_many_redirects"
    thin_page = "thin_page"
    empty_page = "empty_page"
    binary_content = "binary_content"
    page_too_large = "page_too_large"
    crawl_failed = "crawl_failed"
    section_not_found = "section_not_found"
    # judge
    judge_error = "judge_error"


class UrlVerdict(BaseModel):
    """One citation in the seed's ``/verify`` shape, plus ``needs_review``.

    ``confidence`` is None only when no model and no rule produced one (a
    fabricated quote is found by string matching, so there is no model
    confidence to report).
    """

    model_config = ConfigDict(frozen=True)

    url: str
    label: Label
    evidence_quote: str | None = None
    confidence: float | None = Field(default=None, ge=0, le=1)
    final_url: str | None = None
    original_status: int | None = None
    rid: str | None = None
    reason: str | None = None
    needs_review: bool = False


class CitationVerdict(UrlVerdict):
    """One (claim, source) pair: the seed's fields plus what helps a human read it.

    The fields added here never change the label.
    """

    #: The caller's quote and section, echoed so a report row stands alone.
    quote: str | None = None
    section: str | None = None
    #: For a fabricated quote: the passage closest to it and their similarity
    #: in [0, 1], so a truncated or reworded quote reads differently from an
    #: invented one.
    closest_passage: str | None = None
    closest_similarity: float | None = None
    #: Why the judge failed (``judge_error``) or what the fetch met; never a secret.
    detail: str | None = None

    def seed_json(self) -> dict[str, Any]:
        """The seed's ``/verify`` citation shape plus ``needs_review``."""
        return self.model_dump(mode="json", include=set(UrlVerdict.model_fields))


class ClaimVerdict(BaseModel):
    """The verdict on one claim, aggregated from its citations (DESIGN.md §3).

    It compares equal to its label, so ``assert verdict == "supported"`` reads
    naturally in a test, and pytest's assertion rewriting shows the table.
    """

    model_config = ConfigDict(frozen=True)

    claim: str
    label: Label
    citations: list[CitationVerdict] = Field(default_factory=list)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.label.value == other
        if isinstance(other, ClaimVerdict):
            return (self.claim, self.label, self.citations) == (
                other.claim,
                other.label,
                other.citations,
            )
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.claim, self.label))

    def __str__(self) -> str:
        return self.label.value

    def __repr__(self) -> str:
        return f"ClaimVerdict({self.label.value!r}, claim={self.claim!r})\n{self.table()}"

    def table(self) -> str:
        """One row per citation: URL, label, reason, confidence, evidence quote."""
        from pytest_citations.report import citation_table

        return citation_table(self.citations)

    def seed_json(self) -> dict[str, Any]:
        """The seed's ``/verify`` response: ``claim``, ``overall``, ``citations``."""
        return {
            "claim": self.claim,
            "overall": self.label.value,
            "citations": [citation.seed_json() for citation in self.citations],
        }
