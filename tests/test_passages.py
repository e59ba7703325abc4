"""split_passages: DESIGN.md §6, as specification and as properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_citations.passages import split_passages


def test_short_paragraphs_share_a_passage() -> None:
    assert split_passages("one two\n\nthree four", max_words=10) == ["one two three four"]


def test_a_paragraph_that_would_overflow_starts_a_new_passage() -> None:
    text = "a b c\n\nd e f"
    assert split_passages(text, max_words=4) == ["a b c", "d e f"]


def test_a_long_paragraph_is_cut_on_word_boundaries() -> None:
    text = " ".join(f"w{i}" for i in range(7))
    assert split_passages(text, max_words=3) == ["w0 w1 w2", "w3 w4 w5", "w6"]


def test_blank_blocks_are_dropped() -> None:
    assert split_passages("\n\n   \n\nalpha\n\n\t\n\n") == ["alpha"]


def test_windows_and_old_mac_line_endings_split_like_unix() -> None:
    assert split_passages("a\r\n\r\nb\r\rc", max_words=1) == ["a", "b", "c"]


def test_default_budget_is_two_hundred_words() -> None:
    text = " ".join(["word"] * 450)
    assert [len(p.split()) for p in split_passages(text)] == [200, 200, 50]


@pytest.mark.parametrize("max_words", [0, -1])
def test_a_budget_below_one_is_a_value_error(max_words: int) -> None:
    with pytest.raises(ValueError, match="max_words"):
        split_passages("text", max_words=max_words)


@given(st.text(), st.integers(min_value=1, max_value=50))
def test_no_word_is_lost_added_or_reordered(text: str, max_words: int) -> None:
    passages = split_passages(text, max_words)
    assert " ".join(passages).split() == text.replace("\r", "\n").split()


@given(st.text(), st.integers(min_value=1, max_value=50))
def test_every_passage_is_non_empty_and_within_budget(text: str, max_words: int) -> None:
    for passage in split_passages(text, max_words):
        assert 1 <= len(passage.split()) <= max_words
