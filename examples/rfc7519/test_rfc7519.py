"""Seed 003's walk-through as tests: eight citations an LLM made to RFC 7519.

Each citation names a section and (all but one) a quote. The quote is searched in
the RFC first: absent means ``fabricated`` and no model is asked. Found, the
judge reads the section that holds it; with no quote, the section named.
Four citations are exact, one quote is invented, one claim is contradicted by
the very section it quotes ("exp" is OPTIONAL), one quote is real but its
section says nothing about the claim, and one section-only claim is not
settled; the last two fall under the 0.8 auto-accept gate and go to review.

Every test carries ``@pytest.mark.citations``, which fails a test on a
contradicted or fabricated citation: the two bad citations are expected to
fail it (``xfail(strict=True)``), so the suite passes while showing the gate.
Print the seed's table from a run's JSON report::

    pytest examples/rfc7519 --citations-report=report.json
    python examples/rfc7519/table.py report.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
SOURCE = "rfc7519.txt"  # tests run in this folder (conftest.py)
CITATIONS: list[dict[str, Any]] = json.loads((HERE / "citations.json").read_text())

#: Seed 003's published table: label, confidence, needs_review.
EXPECTED: dict[str, tuple[Any, ...]] = {
    key: tuple(row)
    for key, row in json.loads((HERE / "seed_table.json").read_text()).items()
    if not key.startswith("_")
}

WHY_IT_FAILS = {
    "fabricated": "the quote is not in RFC 7519, so the citation is fabricated (no model "
    "is asked) and @pytest.mark.citations fails the test",
    "contradicted": 'section 4.1.4 says "Use of this claim is OPTIONAL.", so the claim is '
    "contradicted and @pytest.mark.citations fails the test",
}


def _case(citation: dict[str, Any]) -> Any:
    marks: list[Any] = [pytest.mark.citations]
    label = EXPECTED[citation["id"]][0]
    if label in WHY_IT_FAILS:
        marks.append(
            pytest.mark.xfail(strict=True, raises=pytest.fail.Exception, reason=WHY_IT_FAILS[label])
        )
    return pytest.param(citation, id=citation["id"], marks=marks)


@pytest.mark.parametrize("citation", [_case(c) for c in CITATIONS])
def test_citation(verify_citation: Any, citation: dict[str, Any]) -> None:
    verdict = verify_citation(
        citation["claim"], SOURCE, quote=citation["quote"], section=citation["section"]
    )
    (result,) = verdict.citations
    assert (result.label.value, result.confidence, result.needs_review) == EXPECTED[citation["id"]]
    if result.label.value == "fabricated":
        assert result.reason == "quote_not_in_source"
        assert result.closest_passage  # where the nearest wording is, for the reviewer
    if result.label.value in ("supported", "contradicted"):
        assert result.evidence_quote  # and the guard checked it is in the section read


def test_the_source_is_the_published_rfc() -> None:
    """The shipped RFC is byte-for-byte the rfc-editor.org text the seed used."""
    import hashlib

    digest = hashlib.sha256((HERE / SOURCE).read_bytes()).hexdigest()
    assert digest == "25ae78139cb24059ac527cd62b0367ffa52be98a4d39482def2765e280cc3f0c"
