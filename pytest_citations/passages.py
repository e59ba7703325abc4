"""Stage 2: cut a page into passages the retriever can rank (DESIGN.md §6).

Sending a whole page to the judge is expensive and noisy: a 2,000-word article
may hold two relevant sentences, and the rest gives the model more to latch on
to. Passages of roughly equal size keep retrieval scores comparable.
"""

from __future__ import annotations

import re

from pytest_citations.settings import DEFAULT_MAX_WORDS

_BLANK_LINE = re.compile(r"\n\s*\n")


def split_passages(text: str, max_words: int = DEFAULT_MAX_WORDS) -> list[str]:
    """Split on blank lines, then pack up to ``max_words`` words per passage.

    A paragraph longer than the cap is cut on word boundaries. Shorter
    paragraphs share a passage until the next one would overflow. Blank blocks
    are dropped. Words are counted with ``str.split()`` so no tokenizer is
    needed; whitespace inside a passage is collapsed to single spaces, which is
    what the guard's normalisation compares against anyway.
    """
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1, got {max_words}")
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    pieces: list[list[str]] = []
    for paragraph in _BLANK_LINE.split(normalised):
        words = paragraph.split()
        if not words:
            continue
        if len(words) > max_words:
            pieces.extend(
                words[start : start + max_words] for start in range(0, len(words), max_words)
            )
        else:
            pieces.append(words)

    passages: list[list[str]] = []
    for words in pieces:
        if passages and len(passages[-1]) + len(words) <= max_words:
            passages[-1] = passages[-1] + words
        else:
            passages.append(list(words))
    return [" ".join(words) for words in passages]
