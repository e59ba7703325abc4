"""Stage 4: ask a language model whether the passages support a claim (DESIGN.md §7).

The judge interprets evidence; it is not the source of truth. The system prompt
(seed 000, verbatim) limits it to three labels and demands a contiguous quote
copied from the passages; the guard (stage 5) then checks that quote against the
page. A provider changes how a verdict is produced, never the rules that accept it:
all three providers send the same prompt and the same JSON schema.

* ``openai`` (default): ``POST {OPENAI_BASE_URL}/chat/completions`` with a strict
  ``json_schema`` response format. Any OpenAI-compatible server (llama.cpp, vLLM,
  LM Studio) works by pointing ``OPENAI_BASE_URL`` at it.
* ``anthropic``: ``POST {ANTHROPIC_BASE_URL}/v1/messages`` with one forced tool whose
  ``input_schema`` is the schema, so the reply is a structured ``tool_use`` block.
* ``ollama``: ``POST {OLLAMA_HOST}/api/chat`` with ``format`` set to the schema.

Everything goes over httpx (no vendor SDK), through the client the recorder seam
hands out, so a cassette can replay a judge call with no key set: a missing key
only becomes :class:`~pytest_citations.errors.MissingCredentialError` in the live
transport, when the request would really leave the machine.

Failures the model or the network cause are :class:`JudgeError`, which the
pipeline turns into ``not_found`` with reason ``judge_error``; its message names
variables, never their values.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_citations.errors import UnknownProviderError
from pytest_citations.settings import OPENAI_API_URL, PROVIDERS, Settings
from pytest_citations.transport import MISSING_CREDENTIAL

logger = logging.getLogger(__name__)

#: The seed's system prompt (seed 000, ``final/citation_verifier/judge.py``), verbatim.
SYSTEM_PROMPT = """You verify one claim against the passages in the user message. The passages are the only evidence you may use.

Return JSON with these fields:
- label: supported, contradicted, or not_found
- evidence_quote: a contiguous quote copied from the passages, or null when the label is not_found
- confidence: a number from 0 to 1

supported means the passages state the claim. contradicted means the passages state the opposite. not_found means the passages do not settle the claim. If you cannot copy a quote that appears in the passages, return not_found and null. Do not add words, numbers, or sources that are not in the passages."""  # noqa: E501

#: The three labels a model may give; ``unreachable`` and ``fabricated`` never reach it.
JUDGE_LABELS: tuple[str, ...] = ("supported", "contradicted", "not_found")

#: Name of the OpenAI response format and of the forced Anthropic tool.
SCHEMA_NAME = "judgement"

#: The reply schema, shared by all providers. Every property is required and no
#: other is allowed, as OpenAI's strict mode demands. The [0, 1] range of
#: ``confidence`` is stated in its description and checked here rather than with
#: ``minimum``/``maximum``, which not every OpenAI-compatible server's grammar
#: supports.
JUDGEMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": {
            "type": "string",
            "enum": list(JUDGE_LABELS),
            "description": "supported, contradicted, or not_found",
        },
        "evidence_quote": {
            "type": ["string", "null"],
            "description": (
                "a contiguous quote copied from the passages, or null when the label is not_found"
            ),
        },
        "confidence": {
            "type": "number",
            "description": "a number from 0 to 1",
        },
    },
    "required": ["label", "evidence_quote", "confidence"],
    "additionalProperties": False,
}

#: Anthropic requires ``max_tokens``; a judgement is a few dozen tokens plus a quote.
ANTHROPIC_MAX_TOKENS = 1024
#: The Messages API version this module speaks.
ANTHROPIC_VERSION = "2023-06-01"

#: Statuses worth another attempt: timeouts, conflicts, rate limits and server
#: errors (including Anthropic's 529 ``overloaded_error``). Every other 4xx is the
#: request's fault and would fail the same way again.
RETRY_STATUSES = frozenset({408, 409, 429})

#: How much of a server's error message a JudgeError quotes.
_DETAIL_CHARS = 300


class Judgement(BaseModel):
    """What the judge answered, before the guard checks its quote against the page."""

    model_config = ConfigDict(frozen=True)

    label: Literal["supported", "contradicted", "not_found"]
    evidence_quote: str | None = None
    confidence: float = Field(ge=0, le=1, allow_inf_nan=False)


class JudgeError(Exception):
    """The judge could not produce a valid judgement (network, refusal, nonsense).

    Not a :class:`~pytest_citations.errors.CitationsError`: it is a content outcome,
    reported as ``not_found`` with reason ``judge_error`` and this message as the
    verdict's detail. The message never contains a credential.
    """


class MalformedReplyError(JudgeError):
    """The reply arrived but is not a valid judgement (bad JSON, wrong shape, bad values).

    The judge retries such a reply once before giving up.
    """


class Judge(Protocol):
    """Anything that turns (claim, passages) into a :class:`Judgement`."""

    provider: str
    model: str

    async def judge(
        self, client: httpx.AsyncClient, claim: str, passages: Sequence[str]
    ) -> Judgement: ...


@dataclass(frozen=True)
class Backoff:
    """Waits between attempts.

    Exponential from ``base`` seconds, doubled per attempt, at most ``cap``, with
    jitter so many workers do not retry in step. A server's ``Retry-After`` wins
    over the computed wait but is cut to ``retry_after_cap``, so a bad header (an
    hour, a date in 2099) cannot hang a test suite.
    """

    base: float = 0.5
    cap: float = 8.0
    retry_after_cap: float = 30.0
    jitter: bool = True

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 0)."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.retry_after_cap))
        wait = min(self.cap, self.base * (2.0**attempt))
        if self.jitter:
            wait *= 0.5 + random.random() / 2
        return wait


#: The waits a judge uses unless :func:`make_judge` is given others (tests pass tiny ones).
DEFAULT_BACKOFF = Backoff()

Sleep = Callable[[float], Awaitable[None]]


def render_user_message(claim: str, passages: Sequence[str]) -> str:
    """The user message: the claim, then the passages numbered from 1.

    Deterministic by construction (no timestamps, no set ordering), so the same
    claim and passages always give a byte-identical request body, which is what
    cassette matching compares.
    """
    if passages:
        body = "\n\n".join(f"[{number}] {text}" for number, text in enumerate(passages, 1))
    else:
        body = "(no passages)"
    return f"Claim:\n{claim}\n\nPassages:\n{body}"


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Parse ``Retry-After``: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).

    Decimal seconds are accepted too (some gateways send them). Returns None for a
    missing or unparseable header, and 0 for a date already past; the caller caps
    the result.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


def _retry_after(response: httpx.Response) -> float | None:
    # OpenAI also sends ``retry-after-ms``; it is more precise when present.
    millis = retry_after_seconds(response.headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    return retry_after_seconds(response.headers.get("retry-after"))


def parse_judgement(raw: object) -> Judgement:
    """Validate a decoded reply (a JSON text or an object) as a :class:`Judgement`.

    Raises :class:`MalformedReplyError` for invalid JSON, a non-object, a missing
    field, a label outside the three, a non-numeric or out-of-range confidence.
    Extra fields are ignored. Never raises anything else.
    """
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as error:
            detail = _short(str(error))
            raise MalformedReplyError(f"the reply is not valid JSON: {detail}") from None
    if not isinstance(raw, Mapping):
        raise MalformedReplyError(f"the reply is a JSON {type(raw).__name__}, not an object")
    fields = {key: raw[key] for key in ("label", "evidence_quote", "confidence") if key in raw}
    try:
        return Judgement.model_validate(fields, strict=True)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'reply'}: {item['msg']}"
            for item in error.errors(include_url=False, include_input=False)
        )
        raise MalformedReplyError(f"the reply does not match the schema: {problems}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _short(text: str, limit: int = _DETAIL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _get(data: object, *path: str | int) -> object:
    """Walk ``path`` through dicts and lists; None where anything is missing."""
    for part in path:
        if isinstance(part, int):
            if not isinstance(data, list) or not -len(data) <= part < len(data):
                return None
            data = data[part]
        else:
            if not isinstance(data, Mapping):
                return None
            data = data.get(part)
    return data


def parse_openai_response(data: object) -> Judgement:
    """Read a chat completion: ``choices[0].message`` content, refusal or truncation.

    A refusal or a reply cut off (``finish_reason`` ``length`` or
    ``content_filter``) is a :class:`JudgeError` (a second try would end the same);
    an unreadable reply is a :class:`MalformedReplyError`.
    """
    message = _get(data, "choices", 0, "message")
    if not isinstance(message, Mapping):
        raise MalformedReplyError("the reply has no choices[0].message")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        raise JudgeError(f"the model refused: {_short(refusal)}")
    finish = _get(data, "choices", 0, "finish_reason")
    if finish == "length":
        raise JudgeError("the reply was cut off at the token limit (finish_reason length)")
    if finish == "content_filter":
        raise JudgeError("the reply was withheld (finish_reason content_filter)")
    content = message.get("content")
    if not isinstance(content, str):
        raise MalformedReplyError("choices[0].message.content is not a string")
    return parse_judgement(content)


def parse_anthropic_response(data: object) -> Judgement:
    """Read a Messages reply: the ``input`` of the forced ``tool_use`` block."""
    stop = _get(data, "stop_reason")
    if stop == "max_tokens":
        raise JudgeError("the reply was cut off at max_tokens (stop_reason max_tokens)")
    if stop == "refusal":
        raise JudgeError("the model refused (stop_reason refusal)")
    content = _get(data, "content")
    if not isinstance(content, list):
        raise MalformedReplyError("the reply has no content list")
    for block in content:
        if (
            isinstance(block, Mapping)
            and block.get("type") == "tool_use"
            and block.get("name") == SCHEMA_NAME
        ):
            return parse_judgement(block.get("input"))
    raise MalformedReplyError(f"the reply has no tool_use block for {SCHEMA_NAME!r}")


def parse_ollama_response(data: object) -> Judgement:
    """Read an ``/api/chat`` reply (``stream: false``): ``message.content``."""
    if _get(data, "done_reason") == "length":
        raise JudgeError("the reply was cut off at the token limit (done_reason length)")
    content = _get(data, "message", "content")
    if not isinstance(content, str):
        raise MalformedReplyError("the reply has no message.content string")
    return parse_judgement(content)


def _encode(body: Mapping[str, Any]) -> bytes:
    """Compact, key-order-preserving JSON: the same body always gives the same bytes."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _error_message(response: httpx.Response) -> str:
    """The server's own error text (OpenAI, Anthropic and Ollama shapes), if any."""
    try:
        data = response.json()
    except (ValueError, UnicodeDecodeError):
        return _short(response.text) if response.text.strip() else ""
    for path in (("error", "message"), ("error",), ("message",), ("detail",)):
        value = _get(data, *path)
        if isinstance(value, str) and value:
            return _short(value)
    return ""


class _HttpJudge:
    """The retry loop and error policy every provider shares."""

    provider: str
    #: The environment variable holding the key, or None when the provider needs none.
    variable: str | None = None

    def __init__(
        self,
        settings: Settings,
        *,
        backoff: Backoff = DEFAULT_BACKOFF,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.model = settings.model
        self.backoff = backoff
        self._sleep = sleep
        self._secrets = settings.secret_values()

    # -- provider specifics ------------------------------------------------------------
    @property
    def url(self) -> str:
        raise NotImplementedError

    def _key(self) -> str | None:
        return None

    def _auth_headers(self, key: str) -> dict[str, str]:
        return {}

    def _extra_headers(self) -> dict[str, str]:
        return {}

    def request_payload(self, claim: str, passages: Sequence[str]) -> dict[str, Any]:
        """The JSON body this provider sends for one judgement."""
        raise NotImplementedError

    def parse(self, data: object) -> Judgement:
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------
    def request_body(self, claim: str, passages: Sequence[str]) -> bytes:
        """The exact bytes sent: deterministic for the same claim and passages."""
        return _encode(self.request_payload(claim, passages))

    def _build(self, client: httpx.AsyncClient, body: bytes) -> httpx.Request:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(self._extra_headers())
        extensions: dict[str, Any] = {}
        key = self._key()
        if key:
            headers.update(self._auth_headers(key))
        elif self.variable is not None and self._key_required():
            # Built anyway: a cassette may answer it. The live transport refuses it.
            extensions[MISSING_CREDENTIAL] = (self.variable, f"the {self.provider} judge")
        return client.build_request(
            "POST", self.url, content=body, headers=headers, extensions=extensions
        )

    def _key_required(self) -> bool:
        return True

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _fail(self, message: str) -> JudgeError:
        return JudgeError(self._scrub(f"{self.provider} judge ({self.model}): {message}"))

    async def judge(
        self, client: httpx.AsyncClient, claim: str, passages: Sequence[str]
    ) -> Judgement:
        """One judgement, with retries.

        429, 408, 409 and 5xx answers and connection errors or timeouts are retried
        up to ``settings.retries`` times with exponential backoff, honouring
        ``Retry-After``. A malformed reply is retried once. Any other 4xx fails at
        once. Everything that fails is a :class:`JudgeError`.
        """
        body = self.request_body(claim, passages)
        try:
            host = httpx.URL(self.url).host
        except httpx.InvalidURL:
            raise self._fail(f"the judge URL {self.url!r} is invalid") from None
        transient = 0  # transient failures so far
        malformed_retried = False
        while True:
            request = self._build(client, body)
            try:
                response = await client.send(request)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as error:
                what = "timed out" if isinstance(error, httpx.TimeoutException) else "failed"
                problem = f"the request to {host} {what} ({type(error).__name__})"
                if transient < self.settings.retries:
                    await self._wait(transient, None, problem)
                    transient += 1
                    continue
                raise self._fail(f"{problem}, {transient + 1} attempt(s)") from None
            except httpx.TransportError as error:
                raise self._fail(
                    f"cannot send the request to {host}: {type(error).__name__}: "
                    f"{_short(str(error))}"
                ) from None

            status = response.status_code
            if status in RETRY_STATUSES or status >= 500:
                problem = f"{host} answered HTTP {status}"
                detail = _error_message(response)
                if transient < self.settings.retries:
                    await self._wait(transient, _retry_after(response), problem)
                    transient += 1
                    continue
                suffix = f": {detail}" if detail else ""
                raise self._fail(f"{problem} on all {transient + 1} attempt(s){suffix}")
            if not 200 <= status < 300:
                raise self._status_error(response)

            try:
                try:
                    data = response.json()
                except (ValueError, UnicodeDecodeError, RecursionError):
                    raise MalformedReplyError("the response body is not JSON") from None
                return self.parse(data)
            except MalformedReplyError as error:
                if malformed_retried:
                    raise self._fail(f"{error} (after one retry)") from None
                logger.info("%s judge: malformed reply (%s); retrying once", self.provider, error)
                malformed_retried = True
            except JudgeError as error:
                raise self._fail(str(error)) from None

    async def _wait(self, attempt: int, retry_after: float | None, problem: str) -> None:
        delay = self.backoff.delay(attempt, retry_after)
        logger.info(
            "%s judge: %s; retry %d of %d in %.2f s",
            self.provider,
            self._scrub(problem),
            attempt + 1,
            self.settings.retries,
            delay,
        )
        await self._sleep(delay)

    def _status_error(self, response: httpx.Response) -> JudgeError:
        status = response.status_code
        if status == 401 and self.variable is not None:
            # The server's text is not quoted: OpenAI echoes part of the rejected key.
            return self._fail(
                f"HTTP 401: the key in {self.variable} was rejected; check the variable "
                "(its value is not shown)"
            )
        detail = _error_message(response)
        hint = ""
        if status == 403 and self.variable is not None:
            hint = f" (the key in {self.variable} may lack access to this model)"
        elif status == 404:
            hint = " (check JUDGE_MODEL and the base URL)"
        suffix = f": {detail}" if detail else ""
        return self._fail(f"HTTP {status}{hint}{suffix}")


class OpenAIJudge(_HttpJudge):
    """Chat completions with a strict JSON-schema response format."""

    provider = "openai"
    variable = "OPENAI_API_KEY"

    @property
    def url(self) -> str:
        return self.settings.openai_base_url.rstrip("/") + "/chat/completions"

    def _key_required(self) -> bool:
        """OpenAI itself needs a key; a compatible server (llama.cpp, vLLM) may need none."""
        return self.settings.openai_base_url.rstrip("/") == OPENAI_API_URL

    def _key(self) -> str | None:
        key = self.settings.openai_api_key
        return key.get_secret_value() if key is not None else None

    def _auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def request_payload(self, claim: str, passages: Sequence[str]) -> dict[str, Any]:
        return {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": render_user_message(claim, passages)},
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": JUDGEMENT_SCHEMA},
            },
        }

    def parse(self, data: object) -> Judgement:
        return parse_openai_response(data)


class AnthropicJudge(_HttpJudge):
    """The Messages API with one forced tool whose input schema is the judgement."""

    provider = "anthropic"
    variable = "ANTHROPIC_API_KEY"

    @property
    def url(self) -> str:
        return self.settings.anthropic_base_url.rstrip("/") + "/v1/messages"

    def _key(self) -> str | None:
        key = self.settings.anthropic_api_key
        return key.get_secret_value() if key is not None else None

    def _auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def _extra_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def request_payload(self, claim: str, passages: Sequence[str]) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_tokens": ANTHROPIC_MAX_TOKENS,
            "temperature": 0,
            "system": SYSTEM_PROMPT,
            "messages": [{"role": "user", "content": render_user_message(claim, passages)}],
            "tools": [
                {
                    "name": SCHEMA_NAME,
                    "description": "Record the judgement of the claim against the passages.",
                    "input_schema": JUDGEMENT_SCHEMA,
                }
            ],
            "tool_choice": {"type": "tool", "name": SCHEMA_NAME},
        }

    def parse(self, data: object) -> Judgement:
        return parse_anthropic_response(data)


class OllamaJudge(_HttpJudge):
    """``/api/chat`` with the schema as ``format``; a local server needs no key."""

    provider = "ollama"
    variable = None

    @property
    def url(self) -> str:
        host = self.settings.ollama_host.strip().rstrip("/")
        if "://" not in host:  # OLLAMA_HOST is often written host:port
            host = "http://" + host
        return host + "/api/chat"

    def request_payload(self, claim: str, passages: Sequence[str]) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": render_user_message(claim, passages)},
            ],
            "format": JUDGEMENT_SCHEMA,
            "stream": False,
            "options": {"temperature": 0},
        }

    def parse(self, data: object) -> Judgement:
        return parse_ollama_response(data)


_JUDGES: dict[str, type[_HttpJudge]] = {
    "openai": OpenAIJudge,
    "anthropic": AnthropicJudge,
    "ollama": OllamaJudge,
}


def make_judge(
    settings: Settings,
    *,
    backoff: Backoff | None = None,
    sleep: Sleep = asyncio.sleep,
) -> Judge:
    """The judge ``settings.judge_provider`` names, using ``settings.model``.

    ``backoff`` and ``sleep`` exist for tests (tiny waits, a fake clock).
    Raises :class:`~pytest_citations.errors.UnknownProviderError` for an unknown
    provider (possible with ``Settings.model_construct`` or a patched value).
    """
    provider = settings.judge_provider
    cls = _JUDGES.get(provider)
    if cls is None:
        raise UnknownProviderError(
            f"JUDGE_PROVIDER={provider!r} is not a judge provider; choose one of "
            f"{', '.join(PROVIDERS)}."
        )
    if backoff is None:
        backoff = dataclasses.replace(DEFAULT_BACKOFF, base=settings.retry_backoff)
    return cls(settings, backoff=backoff, sleep=sleep)
