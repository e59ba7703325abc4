"""The judge's reply parsers and wait rules, without a network (DESIGN.md §7)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_citations.judge import (
    SCHEMA_NAME,
    Backoff,
    JudgeError,
    Judgement,
    MalformedReplyError,
    parse_anthropic_response,
    parse_judgement,
    parse_ollama_response,
    parse_openai_response,
    render_user_message,
    retry_after_seconds,
)

PARSERS: list[Callable[[object], Judgement]] = [
    parse_judgement,
    parse_openai_response,
    parse_anthropic_response,
    parse_ollama_response,
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)

#: Replies that are nearly judgements: the right keys with plausible or hostile values.
near_judgements = st.fixed_dictionaries(
    {},
    optional={
        "label": st.sampled_from(["supported", "contradicted", "not_found", "unreachable", ""])
        | st.text(max_size=12)
        | st.integers(),
        "evidence_quote": st.none() | st.text(max_size=30) | st.integers(),
        "confidence": st.floats(allow_nan=True, allow_infinity=True)
        | st.integers(-2, 2)
        | st.booleans()
        | st.text(max_size=5)
        | st.none(),
        "extra": json_values,
    },
)


def wrap(provider: str, judgement: Any, *, as_text: bool) -> Any:
    content = json.dumps(judgement) if as_text else judgement
    if provider == "openai":
        return {"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}
    if provider == "anthropic":
        return {"content": [{"type": "tool_use", "name": SCHEMA_NAME, "input": judgement}]}
    return {"message": {"content": content}, "done": True}


def only_judgement_or_judge_error(parser: Callable[[object], Judgement], value: object) -> None:
    try:
        result = parser(value)
    except JudgeError:
        return
    assert isinstance(result, Judgement)
    assert 0 <= result.confidence <= 1
    assert result.label in ("supported", "contradicted", "not_found")


@given(value=json_values)
def test_parsers_never_crash_on_any_json_value(value: object) -> None:
    for parser in PARSERS:
        only_judgement_or_judge_error(parser, value)


@given(text=st.text() | st.binary().map(lambda raw: raw.decode("latin-1")))
def test_parse_judgement_never_crashes_on_any_text(text: str) -> None:
    only_judgement_or_judge_error(parse_judgement, text)


@given(judgement=near_judgements, provider=st.sampled_from(["openai", "anthropic", "ollama"]))
def test_provider_parsers_accept_only_valid_judgements(
    judgement: dict[str, Any], provider: str
) -> None:
    parser = {
        "openai": parse_openai_response,
        "anthropic": parse_anthropic_response,
        "ollama": parse_ollama_response,
    }[provider]
    try:
        reply = wrap(provider, judgement, as_text=True)
    except ValueError:  # NaN/inf are not JSON; the wire cannot carry them
        return
    only_judgement_or_judge_error(parser, reply)


def test_a_valid_reply_parses() -> None:
    raw = '{"label": "supported", "evidence_quote": "boils at 100", "confidence": 0.9}'
    assert parse_judgement(raw) == Judgement(
        label="supported", evidence_quote="boils at 100", confidence=0.9
    )


def test_extra_fields_are_ignored_and_an_integer_confidence_is_a_number() -> None:
    judgement = parse_judgement(
        {"label": "not_found", "evidence_quote": None, "confidence": 1, "why": "x"}
    )
    assert judgement.confidence == 1.0


@pytest.mark.parametrize(
    "raw",
    [
        '{"label": "supported", "evidence_quote": "q", "confidence": NaN}',
        '{"label": "supported", "evidence_quote": "q", "confidence": "0.9"}',
        '{"label": "supported", "evidence_quote": "q", "confidence": true}',
        '{"label": "supported", "evidence_quote": "q", "confidence": -0.1}',
        '{"label": "supported", "evidence_quote": 5, "confidence": 0.5}',
        '{"label": "fabricated", "evidence_quote": null, "confidence": 0.5}',
        '{"evidence_quote": null, "confidence": 0.5}',
        "[1, 2]",
        "",
    ],
)
def test_invalid_judgements_are_malformed(raw: str) -> None:
    with pytest.raises(MalformedReplyError):
        parse_judgement(raw)


def test_an_anthropic_reply_without_the_tool_block_is_malformed() -> None:
    with pytest.raises(MalformedReplyError, match="tool_use"):
        parse_anthropic_response({"content": [{"type": "text", "text": "supported"}]})


def test_an_openai_refusal_is_a_judge_error_not_a_malformed_reply() -> None:
    reply = {"choices": [{"message": {"content": None, "refusal": "no"}, "finish_reason": "stop"}]}
    with pytest.raises(JudgeError, match="refused") as caught:
        parse_openai_response(reply)
    assert not isinstance(caught.value, MalformedReplyError)


def test_render_user_message_is_deterministic() -> None:
    passages = ["Ça bout à 100 °C.", "second"]
    assert render_user_message("c", passages) == render_user_message("c", list(passages))


# -- Retry-After and backoff -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("5", 5.0), ("0", 0.0), ("1.5", 1.5), ("-3", 0.0), (" 2 ", 2.0)],
)
def test_retry_after_delay_seconds(header: str, seconds: float) -> None:
    assert retry_after_seconds(header) == seconds


@pytest.mark.parametrize("header", [None, "", "soon", "inf", "nan", "Mon, 99 Foo 2020"])
def test_unusable_retry_after_is_ignored(header: str | None) -> None:
    assert retry_after_seconds(header) is None


def test_retry_after_http_date() -> None:
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    earlier = format_datetime(now - timedelta(seconds=7), usegmt=True)
    assert retry_after_seconds(later, now=now) == 7.0
    assert retry_after_seconds(earlier, now=now) == 0.0


def test_backoff_doubles_up_to_the_cap() -> None:
    backoff = Backoff(base=0.5, cap=3.0, jitter=False)
    assert [backoff.delay(attempt) for attempt in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_backoff_prefers_retry_after_but_caps_it() -> None:
    backoff = Backoff(base=0.5, retry_after_cap=10.0)
    assert backoff.delay(0, retry_after=4.0) == 4.0
    assert backoff.delay(0, retry_after=3600.0) == 10.0


def test_jitter_stays_between_half_and_full_wait() -> None:
    backoff = Backoff(base=1.0, cap=8.0, jitter=True)
    for _ in range(50):
        assert 2.0 <= backoff.delay(2) <= 4.0
