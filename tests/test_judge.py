"""The judge stage over real HTTP against the scripted simulators (DESIGN.md §7).

Every reply here comes from tests/simulators (scripted fixtures, not model traces).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from simulators._server import Simulator
from simulators.scripted import FAKE_KEY, Fault, ScriptedJudge

from pytest_citations import transport
from pytest_citations.errors import MissingCredentialError, UnknownProviderError
from pytest_citations.judge import (
    ANTHROPIC_VERSION,
    JUDGEMENT_SCHEMA,
    SCHEMA_NAME,
    SYSTEM_PROMPT,
    Backoff,
    Judge,
    JudgeError,
    Judgement,
    OllamaJudge,
    make_judge,
    render_user_message,
)
from pytest_citations.settings import OPENAI_API_URL, Settings

CLAIM = "Water boils at 100 degrees Celsius at sea level."
PASSAGES = [
    "Water boils at 100 degrees Celsius at sea level.",
    "At altitude the boiling point is lower.",
]
#: Tiny waits so retry tests stay fast; Retry-After is honoured up to 2 s.
FAST = Backoff(base=0.001, cap=0.01, retry_after_cap=2.0, jitter=False)
PROVIDERS = ["openai", "anthropic", "ollama"]


def settings_for(provider: str, sim: Simulator | None, **overrides: Any) -> Settings:
    url = sim.url if sim is not None else "http://127.0.0.1:9"
    values: dict[str, Any] = {
        "openai": {"openai_base_url": url + "/v1", "openai_api_key": FAKE_KEY},
        "anthropic": {"anthropic_base_url": url, "anthropic_api_key": FAKE_KEY},
        "ollama": {"ollama_host": url},
    }[provider]
    values = {"judge_provider": provider, "retries": 2, **values, **overrides}
    return Settings(**values)


def run(
    judge: Judge,
    claim: str = CLAIM,
    passages: Sequence[str] = PASSAGES,
    *,
    timeout: float = 5.0,
    live: httpx.AsyncBaseTransport | None = None,
) -> Judgement:
    async def go() -> Judgement:
        inner = live or transport.LiveTransport(allow_private_hosts=True)
        async with transport.client_for(inner, timeout=timeout) as client:
            return await judge.judge(client, claim, passages)

    return asyncio.run(go())


@pytest.fixture(params=PROVIDERS)
def provider_sim(request: pytest.FixtureRequest) -> tuple[str, Simulator]:
    """Each provider with its simulator, for behaviours all three share."""
    provider: str = request.param
    return provider, request.getfixturevalue(f"{provider}_sim")


def brain(sim: Simulator) -> ScriptedJudge:
    state: ScriptedJudge = sim.state
    return state


# -- the request each provider sends --------------------------------------------------------


def test_openai_request_is_strict_json_schema_with_verbatim_prompt(openai_sim: Simulator) -> None:
    run(make_judge(settings_for("openai", openai_sim, judge_model="gpt-test"), backoff=FAST))
    (request,) = brain(openai_sim).requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {FAKE_KEY}"
    body = request.json
    assert body["model"] == "gpt-test"
    assert body["temperature"] == 0
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": render_user_message(CLAIM, PASSAGES)},
    ]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": JUDGEMENT_SCHEMA},
    }


def test_anthropic_request_forces_the_judgement_tool(anthropic_sim: Simulator) -> None:
    run(make_judge(settings_for("anthropic", anthropic_sim, judge_model="claude-test")))
    (request,) = brain(anthropic_sim).requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == FAKE_KEY
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION
    body = request.json
    assert body["model"] == "claude-test"
    assert body["temperature"] == 0
    assert body["system"] == SYSTEM_PROMPT
    assert body["messages"] == [{"role": "user", "content": render_user_message(CLAIM, PASSAGES)}]
    assert [tool["name"] for tool in body["tools"]] == [SCHEMA_NAME]
    assert body["tools"][0]["input_schema"] == JUDGEMENT_SCHEMA
    assert body["tool_choice"] == {"type": "tool", "name": SCHEMA_NAME}


def test_ollama_request_sends_the_schema_as_format_without_streaming(
    ollama_sim: Simulator,
) -> None:
    run(make_judge(settings_for("ollama", ollama_sim, judge_model="llama-test")))
    (request,) = brain(ollama_sim).requests
    assert request.path == "/api/chat"
    assert "authorization" not in request.headers
    body = request.json
    assert body["model"] == "llama-test"
    assert body["format"] == JUDGEMENT_SCHEMA
    assert body["stream"] is False
    assert body["options"] == {"temperature": 0}
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}


def test_schema_requires_every_field_and_forbids_others() -> None:
    assert set(JUDGEMENT_SCHEMA["required"]) == set(JUDGEMENT_SCHEMA["properties"])
    assert JUDGEMENT_SCHEMA["additionalProperties"] is False
    assert JUDGEMENT_SCHEMA["properties"]["label"]["enum"] == [
        "supported",
        "contradicted",
        "not_found",
    ]


def test_the_model_defaults_to_the_providers_default() -> None:
    assert make_judge(Settings(judge_provider="anthropic")).model == "claude-3-5-haiku-latest"
    assert make_judge(Settings()).provider == "openai"


def test_request_body_is_byte_identical_for_the_same_input(
    provider_sim: tuple[str, Simulator],
) -> None:
    provider, sim = provider_sim
    judge = make_judge(settings_for(provider, sim))
    run(judge)
    run(make_judge(settings_for(provider, sim)))
    first, second = brain(sim).requests
    assert first.body == second.body
    assert first.body == judge.request_body(CLAIM, PASSAGES)  # type: ignore[attr-defined]


def test_user_message_numbers_the_passages() -> None:
    assert render_user_message("C", ["a b", "c"]) == "Claim:\nC\n\nPassages:\n[1] a b\n\n[2] c"
    assert render_user_message("C", []) == "Claim:\nC\n\nPassages:\n(no passages)"


def test_ollama_host_without_a_scheme_means_http() -> None:
    judge = OllamaJudge(Settings(judge_provider="ollama", ollama_host="localhost:11434"))
    assert judge.url == "http://localhost:11434/api/chat"


# -- parsing ---------------------------------------------------------------------------------


def test_each_provider_returns_the_scripted_judgement(
    provider_sim: tuple[str, Simulator],
) -> None:
    provider, sim = provider_sim
    brain(sim).reply(CLAIM, "supported", PASSAGES[0], 0.96)
    judgement = run(make_judge(settings_for(provider, sim)))
    assert judgement == Judgement(label="supported", evidence_quote=PASSAGES[0], confidence=0.96)


def test_an_unscripted_claim_gets_the_default_not_found(
    provider_sim: tuple[str, Simulator],
) -> None:
    provider, sim = provider_sim
    judgement = run(make_judge(settings_for(provider, sim)))
    assert judgement == Judgement(label="not_found", evidence_quote=None, confidence=0.3)


def test_a_quote_not_in_the_passages_is_returned_as_is_for_the_guard(
    openai_sim: Simulator,
) -> None:
    brain(openai_sim).fail_next(Fault.foreign_quote("boils at 50 degrees"))
    judgement = run(make_judge(settings_for("openai", openai_sim)))
    assert (judgement.label, judgement.evidence_quote) == ("supported", "boils at 50 degrees")


def test_openai_refusal_is_a_judge_error_without_retry(openai_sim: Simulator) -> None:
    brain(openai_sim).fail_next(Fault.refusal("I can't help with that."))
    with pytest.raises(JudgeError, match="refused"):
        run(make_judge(settings_for("openai", openai_sim), backoff=FAST))
    assert len(brain(openai_sim).requests) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_reply_cut_off_at_the_token_limit_is_a_judge_error(
    provider: str, request: pytest.FixtureRequest
) -> None:
    sim: Simulator = request.getfixturevalue(f"{provider}_sim")
    brain(sim).fail_next(Fault.truncated())
    with pytest.raises(JudgeError, match="cut off"):
        run(make_judge(settings_for(provider, sim), backoff=FAST))
    assert len(brain(sim).requests) == 1


# -- malformed replies: one retry ----------------------------------------------------------


def test_a_malformed_reply_is_retried_once(provider_sim: tuple[str, Simulator]) -> None:
    provider, sim = provider_sim
    brain(sim).reply(CLAIM, "contradicted", PASSAGES[1], 0.7)
    brain(sim).fail_next(Fault.malformed("not json at all"))
    judgement = run(make_judge(settings_for(provider, sim), backoff=FAST))
    assert judgement.label == "contradicted"
    assert len(brain(sim).requests) == 2


def test_two_malformed_replies_are_a_judge_error(provider_sim: tuple[str, Simulator]) -> None:
    provider, sim = provider_sim
    brain(sim).fail_next(Fault.malformed(), Fault.malformed('{"label": "maybe"}'))
    with pytest.raises(JudgeError, match="after one retry"):
        run(make_judge(settings_for(provider, sim), backoff=FAST))
    assert len(brain(sim).requests) == 2


def test_confidence_out_of_range_is_malformed(openai_sim: Simulator) -> None:
    brain(openai_sim).reply(CLAIM, "supported", PASSAGES[0], 1.5)
    with pytest.raises(JudgeError, match="confidence"):
        run(make_judge(settings_for("openai", openai_sim), backoff=FAST))
    assert len(brain(openai_sim).requests) == 2


def test_a_label_outside_the_three_is_malformed(anthropic_sim: Simulator) -> None:
    brain(anthropic_sim).reply(CLAIM, "unreachable", None, 0.5)
    with pytest.raises(JudgeError, match="label"):
        run(make_judge(settings_for("anthropic", anthropic_sim), backoff=FAST))
    assert len(brain(anthropic_sim).requests) == 2


# -- transient failures: bounded retries with backoff -------------------------------------


def test_429_is_retried_after_the_retry_after_seconds(openai_sim: Simulator) -> None:
    brain(openai_sim).fail_next(Fault.status(429, retry_after="1"))
    started = time.monotonic()
    judgement = run(make_judge(settings_for("openai", openai_sim), backoff=FAST))
    elapsed = time.monotonic() - started
    assert judgement.label == "not_found"
    assert len(brain(openai_sim).requests) == 2
    assert 0.95 <= elapsed < 1.9  # waited the header's second, not the 1 ms backoff


def test_a_huge_retry_after_is_capped(anthropic_sim: Simulator) -> None:
    brain(anthropic_sim).fail_next(Fault.status(429, retry_after="3600"))
    short = Backoff(base=0.001, cap=0.01, retry_after_cap=0.2, jitter=False)
    started = time.monotonic()
    run(make_judge(settings_for("anthropic", anthropic_sim), backoff=short))
    assert time.monotonic() - started < 1.5
    assert len(brain(anthropic_sim).requests) == 2


def test_an_http_date_retry_after_in_the_past_means_retry_now(ollama_sim: Simulator) -> None:
    brain(ollama_sim).fail_next(Fault.status(429, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"))
    started = time.monotonic()
    run(make_judge(settings_for("ollama", ollama_sim), backoff=FAST))
    assert time.monotonic() - started < 1.0
    assert len(brain(ollama_sim).requests) == 2


def test_anthropic_529_overloaded_is_retried(anthropic_sim: Simulator) -> None:
    brain(anthropic_sim).fail_next(Fault.status(529), Fault.status(500))
    brain(anthropic_sim).reply(CLAIM, "supported", PASSAGES[0], 0.9)
    judgement = run(make_judge(settings_for("anthropic", anthropic_sim), backoff=FAST))
    assert judgement.label == "supported"
    assert len(brain(anthropic_sim).requests) == 3


def test_5xx_retries_are_bounded_by_settings_retries(provider_sim: tuple[str, Simulator]) -> None:
    provider, sim = provider_sim
    brain(sim).fail_next(*[Fault.status(503)] * 10)
    with pytest.raises(JudgeError, match="HTTP 503 on all 3 attempt"):
        run(make_judge(settings_for(provider, sim, retries=2), backoff=FAST))
    assert len(brain(sim).requests) == 3


def test_retries_zero_means_one_attempt(openai_sim: Simulator) -> None:
    brain(openai_sim).fail_next(Fault.status(500))
    with pytest.raises(JudgeError, match="HTTP 500"):
        run(make_judge(settings_for("openai", openai_sim, retries=0), backoff=FAST))
    assert len(brain(openai_sim).requests) == 1


def test_backoff_waits_grow_exponentially(openai_sim: Simulator) -> None:
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    brain(openai_sim).fail_next(*[Fault.status(500)] * 3)
    backoff = Backoff(base=0.5, cap=1.5, jitter=False)
    judge = make_judge(
        settings_for("openai", openai_sim, retries=3), backoff=backoff, sleep=fake_sleep
    )
    run(judge)
    assert waits == [0.5, 1.0, 1.5]


def test_a_dropped_connection_is_retried(ollama_sim: Simulator) -> None:
    brain(ollama_sim).fail_next(Fault.disconnect())
    run(make_judge(settings_for("ollama", ollama_sim), backoff=FAST))
    assert len(brain(ollama_sim).requests) == 2


def test_timeouts_are_retried_then_reported(openai_sim: Simulator) -> None:
    brain(openai_sim).fail_next(*[Fault.delay(0.6)] * 2)
    judge = make_judge(settings_for("openai", openai_sim, retries=1), backoff=FAST)
    with pytest.raises(JudgeError, match="timed out"):
        run(judge, timeout=0.2)
    assert len(brain(openai_sim).requests) == 2


def test_nothing_listening_is_a_judge_error_after_retries() -> None:
    judge = make_judge(settings_for("ollama", None, retries=1), backoff=FAST)
    with pytest.raises(JudgeError, match="failed"):
        run(judge)


# -- 4xx other than 429: no retry -------------------------------------------------------------


def test_a_400_is_not_retried(provider_sim: tuple[str, Simulator]) -> None:
    provider, sim = provider_sim
    brain(sim).fail_next(Fault.status(400, message="bad request body"))
    with pytest.raises(JudgeError, match=r"HTTP 400.*bad request body"):
        run(make_judge(settings_for(provider, sim), backoff=FAST))
    assert len(brain(sim).requests) == 1


@pytest.mark.parametrize(
    ("provider", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_a_rejected_key_names_the_variable_never_the_value(
    provider: str,
    variable: str,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sim: Simulator = request.getfixturevalue(f"{provider}_sim")
    brain(sim).api_key = "sk-the-right-one"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(JudgeError) as caught:
        run(make_judge(settings_for(provider, sim), backoff=FAST))
    message = str(caught.value)
    assert "401" in message
    assert variable in message
    assert "SECRET123" not in message and FAKE_KEY not in message
    assert "SECRET123" not in caplog.text
    assert len(brain(sim).requests) == 1


def test_secrets_in_a_server_error_message_are_scrubbed(
    openai_sim: Simulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    brain(openai_sim).fail_next(
        Fault.status(503, message=f"upstream saw {FAKE_KEY}"),
        Fault.status(403, message=f"key {FAKE_KEY} may not use this model"),
    )
    with pytest.raises(JudgeError, match="403") as caught:
        run(make_judge(settings_for("openai", openai_sim), backoff=FAST))
    assert FAKE_KEY not in str(caught.value)
    assert FAKE_KEY not in caplog.text


# -- credentials: refused only when a request would really go out --------------------------


@pytest.mark.parametrize(
    ("provider", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_a_missing_key_raises_through_the_live_transport(
    provider: str, variable: str, request: pytest.FixtureRequest
) -> None:
    sim: Simulator = request.getfixturevalue(f"{provider}_sim")
    settings = settings_for(provider, sim, openai_api_key=None, anthropic_api_key=None)
    if provider == "openai":  # OpenAI itself needs the key; a compatible server may not
        settings = settings.model_copy(update={"openai_base_url": OPENAI_API_URL})
    with pytest.raises(MissingCredentialError, match=variable):
        run(make_judge(settings, backoff=FAST))
    assert brain(sim).requests == []  # nothing left the machine


class ReplayTransport(httpx.AsyncBaseTransport):
    """Stands in for a cassette: answers every request with one canned response."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json=self.payload)


CANNED = {"label": "supported", "evidence_quote": PASSAGES[0], "confidence": 0.9}
REPLAYS: dict[str, dict[str, Any]] = {
    "openai": {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps(CANNED), "refusal": None},
                "finish_reason": "stop",
            }
        ]
    },
    "anthropic": {
        "content": [{"type": "tool_use", "id": "t", "name": SCHEMA_NAME, "input": CANNED}],
        "stop_reason": "tool_use",
    },
}


@pytest.mark.parametrize(
    ("provider", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_a_missing_key_is_fine_when_a_replay_answers(provider: str, variable: str) -> None:
    replay = ReplayTransport(REPLAYS[provider])
    settings = settings_for(provider, None, openai_api_key=None, anthropic_api_key=None)
    settings = settings.model_copy(update={"openai_base_url": OPENAI_API_URL})
    judgement = run(make_judge(settings, backoff=FAST), live=replay)
    assert judgement.label == "supported"
    (sent,) = replay.requests
    assert sent.extensions[transport.MISSING_CREDENTIAL] == (variable, f"the {provider} judge")
    assert "authorization" not in sent.headers and "x-api-key" not in sent.headers


def test_an_openai_compatible_server_needs_no_key(openai_sim: Simulator) -> None:
    brain(openai_sim).api_key = None  # like llama.cpp or vLLM started without --api-key
    settings = settings_for("openai", openai_sim, openai_api_key=None)
    assert run(make_judge(settings)).label == "not_found"
    (sent,) = brain(openai_sim).requests
    assert "authorization" not in sent.headers


def test_ollama_needs_no_key(ollama_sim: Simulator) -> None:
    settings = Settings(judge_provider="ollama", ollama_host=ollama_sim.url)
    assert settings.secret_values() == []
    assert run(make_judge(settings)).label == "not_found"
    assert len(brain(ollama_sim).requests) == 1


# -- make_judge ------------------------------------------------------------------------------


def test_make_judge_rejects_an_unknown_provider() -> None:
    settings = Settings.model_construct(**{**Settings().__dict__, "judge_provider": "bogus"})
    with pytest.raises(UnknownProviderError, match="bogus"):
        make_judge(settings)


def test_a_callable_script_sees_the_claim_and_passages(ollama_sim: Simulator) -> None:
    seen: list[tuple[str, list[str]]] = []

    def script(claim: str, passages: list[str]) -> tuple[str, str, float]:
        seen.append((claim, passages))
        return ("contradicted", passages[1], 0.8)

    brain(ollama_sim).script = script
    judgement = run(make_judge(settings_for("ollama", ollama_sim)))
    assert seen == [(CLAIM, PASSAGES)]
    assert judgement.evidence_quote == PASSAGES[1]
