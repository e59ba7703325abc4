"""Stage 5: the deterministic checks that keep the judge an interpreter, not an oracle.

Two rules (DESIGN.md §8, §9):

* the judge's evidence quote must be an exact substring of the passages it was
  shown, after normalisation, or a supported/contradicted verdict is downgraded
  to not_found with confidence 0;
* a quote the *caller* supplies must be in the source, or the citation is
  fabricated and no model is ever asked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from difflib import SequenceMatcher

from pytest_citations.models import Label, Reason

_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "\u00a0": " "})
_SPACE = re.compile(r"\s+")
#: Inline Markdown a reader never sees: pages arrive as Markdown (Crawlbase
#: ``format=md``, trafilatura), while a quote is copied from the rendered page.
#: ``[text](url)`` and ``![alt](url)`` keep their text; ``**``, ``__`` and
#: backticks go; ``*word*`` emphasis keeps the word (a lone ``*``, as in
#: ``a * b``, stays).
_MARKDOWN_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")
_MARKDOWN_MARKS = re.compile(r"\*\*|__|`+")
_MARKDOWN_EMPHASIS = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]*?\S)\*(?![\w*])")


def normalize(text: str) -> str:
    """Fold curly quotes, drop inline Markdown, collapse whitespace, strip.

    Applied to both sides of every comparison, so a quote matches across line
    wraps and across ``**bold**`` or ``[links](...)`` in the Markdown page.
    """
    plain = _MARKDOWN_LINK.sub(r"\1", text.translate(_QUOTES))
    plain = _MARKDOWN_EMPHASIS.sub(r"\1", _MARKDOWN_MARKS.sub("", plain))
    return _SPACE.sub(" ", plain).strip()


def quote_in_passages(quote: str, passages: Iterable[str]) -> bool:
    """True when the normalised quote is a substring of one normalised passage.

    An empty quote proves nothing, so it is never "in" the passages.
    """
    needle = normalize(quote)
    if not needle:
        return False
    return any(needle in normalize(passage) for passage in passages)


def guard_judgement(
    label: Label | str,
    quote: str | None,
    confidence: float,
    passages: Sequence[str],
) -> tuple[Label, str | None, float, str | None]:
    """Drop a quote the passages do not contain; return (label, quote, confidence, reason).

    Supported and contradicted both need a real quote: without one the citation
    becomes not_found, confidence 0, ``evidence_quote_not_in_source``. A
    not_found with a bad quote loses the quote and its confidence too, since a
    judge that invents text is not to be trusted on the rest of its answer.
    """
    judged = Label(label)
    if judged in (Label.supported, Label.contradicted):
        if quote and quote_in_passages(quote, passages):
            return judged, quote, confidence, None
        return Label.not_found, None, 0.0, Reason.evidence_quote_not_in_source.value
    if quote and not quote_in_passages(quote, passages):
        return Label.not_found, None, 0.0, Reason.evidence_quote_not_in_source.value
    # A not_found needs no evidence (seed 000 drops its quote): the passages
    # simply do not settle the claim.
    return Label.not_found, None, confidence, None


def _section_order(number: str) -> list[int]:
    return [int(part) if part.isdigit() else 0 for part in number.split(".")]


def find_quote(quote: str, sections: Mapping[str, str]) -> str | None:
    """The first section, in numeric order ("2" < "4.1" < "4.1.3" < "10"), containing the quote."""
    needle = normalize(quote)
    if not needle:
        return None
    for number in sorted(sections, key=_section_order):
        if needle in normalize(sections[number]):
            return number
    return None


def passages_holding(quote: str, passages: Sequence[str]) -> str | None:
    """The passage, or run of consecutive passages, that holds the quote; None if absent.

    Passages partition the page, so a quote may straddle one cut or several
    (a long quote, small passages): it is found in the passages joined back
    together, and the judge reads exactly the passages it spans.
    """
    needle = normalize(quote)
    if not needle:
        return None
    texts = [normalize(passage) for passage in passages]
    starts: list[int] = []
    offset = 0
    for text in texts:
        starts.append(offset)
        offset += len(text) + 1  # the joining space
    position = " ".join(texts).find(needle)
    if position < 0:
        return None
    end = position + len(needle)
    first = max(i for i, start in enumerate(starts) if start <= position)
    last = max(i for i, start in enumerate(starts) if start < end)
    return " ".join(passages[first : last + 1])


def closest_passage(quote: str, passages: Sequence[str]) -> tuple[str | None, float]:
    """The passage holding the span most like ``quote``, and that span's similarity in [0, 1].

    Word-level ``SequenceMatcher`` over windows the length of the quote: a
    truncated or reworded quote scores high (0.7+), an invented one low. Only
    reported, never used to change a label: the quote-first rule is exact by
    design (seed 003) and approximate matching would hide fabrication.
    """
    words = normalize(quote).split()
    if not words or not passages:
        return None, 0.0
    width = len(words)
    step = max(1, width // 2)
    best_index, best_score = 0, 0.0
    matcher = SequenceMatcher(autojunk=False)
    matcher.set_seq2(words)
    for index, passage in enumerate(passages):
        tokens = normalize(passage).split()
        starts = range(0, max(1, len(tokens) - width + 1), step)
        for start in starts:
            matcher.set_seq1(tokens[start : start + width])
            if matcher.real_quick_ratio() <= best_score or matcher.quick_ratio() <= best_score:
                continue
            score = matcher.ratio()
            if score > best_score:
                best_index, best_score = index, score
    return passages[best_index], round(best_score, 4)
