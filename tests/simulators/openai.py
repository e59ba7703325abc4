"""OpenAI Chat Completions simulator: ``POST /v1/chat/completions`` on 127.0.0.1.

Replies are FIXTURES, NOT MODEL TRACES: verdicts come from a ScriptedJudge script
(:mod:`tests.simulators.scripted`), never from a model.

Documented behaviours reproduced (OpenAI API reference, "Chat Completions" and
"Structured Outputs" guides, "Error codes"):

* Authentication is ``Authorization: Bearer <key>``. No key → 401 "You didn't
  provide an API key"; a wrong key → 401 ``invalid_api_key`` whose message echoes a
  masked form of the key (first characters and last four), as the real API does —
  which is why a client must never quote this message.
* Errors are ``{"error": {"message", "type", "param", "code"}}``; 429 carries
  ``retry-after`` (seconds) when the fault sets it; 500/503 are ``server_error``.
* ``response_format: {"type": "json_schema", "json_schema": {"name", "strict",
  "schema"}}``; with ``strict: true`` every property must be listed in
  ``required`` and ``additionalProperties`` must be false, else 400
  ``invalid_request_error`` (param ``response_format``).
* A success is a ``chat.completion`` object: ``choices[0].message`` with
  ``role``, ``content`` (the JSON text) and ``refusal`` (null, or the refusal text
  with null content), ``finish_reason`` (``stop``, or ``length`` when cut off),
  and ``usage`` token counts.

Not reproduced: streaming, tools, n > 1, logprobs, real token counting.
Standalone: ``cd tests && python -m simulators.openai`` (base URL ``<url>/v1``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from .scripted import Fault, JudgeHandler, Recorded, serve_standalone, user_message_of

PATH = "/v1/chat/completions"

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}


def _mask(key: str) -> str:
    """How OpenAI echoes a rejected key: a prefix, stars, the last four characters."""
    return key[:3] + "*" * max(0, len(key) - 7) + key[-4:] if len(key) > 7 else "***"


def error_body(status: int, message: str, *, param: str | None = None) -> dict[str, Any]:
    kind, code = _ERROR_TYPES.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def strict_schema_problem(schema: Any, where: str = "schema") -> str | None:
    """Why a strict schema would be refused, or None: objects list every property
    in ``required`` and set ``additionalProperties: false``."""
    if not isinstance(schema, dict):
        return f"{where} is not an object"
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return f"'additionalProperties' is required to be supplied and to be false in {where}"
        missing = sorted(set(properties) - set(schema.get("required", [])))
        if missing:
            return f"'required' is required to include every property in {where}; missing {missing}"
        for name, sub in properties.items():
            problem = strict_schema_problem(sub, f"{where}.{name}")
            if problem:
                return problem
    return None


class OpenAIHandler(JudgeHandler):
    def answer(self, recorded: Recorded, fault: Fault | None) -> None:
        if recorded.path.split("?", 1)[0] != PATH:
            self.send_json(404, error_body(404, f"Invalid URL (POST {recorded.path})"))
            return
        authorization = recorded.headers.get("authorization", "")
        key = authorization[7:] if authorization.startswith("Bearer ") else ""
        expected = self.brain.api_key
        # api_key None: a compatible server started without a key (llama.cpp, vLLM).
        if not key and expected is not None:
            self.send_json(
                401,
                {
                    "error": {
                        "message": "You didn't provide an API key. You need to provide your "
                        "API key in an Authorization header using Bearer auth.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
            return
        if expected is not None and key != expected:
            self.send_json(
                401,
                error_body(
                    401,
                    f"Incorrect API key provided: {_mask(key)}. You can find your API key at "
                    "https://platform.openai.com/account/api-keys.",
                ),
            )
            return
        if fault is not None and fault.kind == "status":
            headers = {"retry-after": fault.retry_after} if fault.retry_after is not None else None
            message = fault.message or (
                "Rate limit reached for requests"
                if fault.code == 429
                else "The server had an error"
            )
            self.send_json(fault.code, error_body(fault.code, message), headers=headers)
            return
        body = recorded.json
        if not isinstance(body, dict):
            self.send_json(
                400, error_body(400, "We could not parse the JSON body of your request.")
            )
            return
        if not isinstance(body.get("model"), str):
            self.send_json(
                400, error_body(400, "you must provide a model parameter", param="model")
            )
            return
        user = user_message_of(body.get("messages"))
        if user is None:
            self.send_json(
                400, error_body(400, "messages must hold a user message", param="messages")
            )
            return
        response_format = body.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            spec = response_format.get("json_schema") or {}
            if spec.get("strict") is True:
                problem = strict_schema_problem(spec.get("schema"))
                if problem:
                    self.send_json(
                        400,
                        error_body(
                            400,
                            f"Invalid schema for response_format '{spec.get('name')}': {problem}.",
                            param="response_format",
                        ),
                    )
                    return

        verdict = self.verdict_for(user, fault)
        content: str | None = json.dumps(verdict.as_json())
        refusal: str | None = None
        finish = "stop"
        if fault is not None:
            if fault.kind == "malformed":
                content = fault.content
            elif fault.kind == "refusal":
                content, refusal = None, fault.message
            elif fault.kind == "truncated":
                content, finish = (content or "")[:20], "length"
        prompt_tokens = sum(len(str(m).split()) for m in body.get("messages", []))
        completion_tokens = len((content or refusal or "").split())
        self.send_json(
            200,
            {
                "id": f"chatcmpl-sim{len(self.brain.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": refusal},
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
                "system_fingerprint": "fp_simulator",
            },
            headers={"x-request-id": f"req_sim{len(self.brain.requests)}"},
        )


if __name__ == "__main__":
    serve_standalone(OpenAIHandler, "openai")
