"""A stand-in for your RAG pipeline: the answers two prompt versions gave, with citations.

In your own suite this would call your retriever and model. Here it returns
canned answers, so the example shows the gate and not a model: ``v1`` is the
prompt on main, ``v2`` the candidate ("answer confidently"), whose third claim
overstates what its cited page says.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCS = "https://example.com/docs/jwt-expiry"
EXP_SENTENCE = (
    'The "exp" (expiration time) claim identifies the expiration time on or after which '
    "the JWT MUST NOT be accepted for processing."
)
QUESTION = "How does JWT expiry work?"


@dataclass(frozen=True)
class Citation:
    claim: str
    urls: list[str]
    quote: str | None = None


@dataclass(frozen=True)
class Answer:
    text: str
    citations: list[Citation]


_SHARED = [
    Citation("A JWT must not be accepted on or after its expiration time.", [DOCS], EXP_SENTENCE),
    Citation("Validators may allow a few minutes of leeway for clock skew.", [DOCS]),
]

ANSWERS: dict[str, list[Citation]] = {
    "v1": [*_SHARED, Citation('The "exp" claim is optional.', [DOCS])],
    "v2": [*_SHARED, Citation('Every JWT must carry an "exp" claim.', [DOCS], EXP_SENTENCE)],
}


def rag(question: str, *, prompt: str = "v1") -> Answer:
    """The answer prompt ``prompt`` gives to ``question`` (only :data:`QUESTION` is canned)."""
    if question != QUESTION:
        raise ValueError(f"this stand-in only answers {QUESTION!r}")
    citations = ANSWERS[prompt]
    return Answer(" ".join(c.claim for c in citations), citations)
