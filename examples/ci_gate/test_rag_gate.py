"""Gating a prompt change on citations: the test a team keeps next to its RAG code.

``@pytest.mark.citations(floor=0.8)`` fails the test when any citation is
contradicted or fabricated, or when fewer than 80 % of its citations are
supported. ``v2`` (the candidate prompt) states that every JWT must carry an
"exp" claim and cites a page saying the claim is OPTIONAL: the gate fails it,
which this example records as an expected failure. In a real pull request
there would be no xfail: the red test is the point.

Session gates on top (see README.md)::

    pytest examples/ci_gate --citations-floor=0.8
    pytest examples/ci_gate --citations-baseline=examples/ci_gate/baseline.json
"""

from __future__ import annotations

from typing import Any

import pytest
from rag import QUESTION, rag

NEW_PROMPT_FAILS = pytest.mark.xfail(
    strict=True,
    raises=pytest.fail.Exception,  # the marker's gate, not an assertion in the test
    reason='prompt v2 claims every JWT must carry "exp"; the cited page says "Use of this '
    'claim is OPTIONAL." - the citations gate fails it (contradicted, precision 2/3 < 0.8)',
)


@pytest.mark.citations(floor=0.8)
@pytest.mark.parametrize("prompt", ["v1", pytest.param("v2", marks=NEW_PROMPT_FAILS)])
def test_answer_cites_its_sources_honestly(verify_citation: Any, prompt: str) -> None:
    answer = rag(QUESTION, prompt=prompt)
    for citation in answer.citations:
        verify_citation(citation.claim, citation.urls, quote=citation.quote)
