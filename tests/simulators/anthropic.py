"""Anthropic Messages API simulator: ``POST /v1/messages`` on 127.0.0.1.

Replies are FIXTURES, NOT MODEL TRACES: verdicts come from a ScriptedJudge script
(:mod:`tests.simulators.scripted`), never from a model.

Documented behaviours reproduced (Anthropic API reference "Messages", "Tool use",
"Errors"):

* ``x-api-key`` authenticates: missing or wrong → 401 ``authentication_error``.
  ``anthropic-version`` is required: missing → 400 ``invalid_request_error``.
* Errors are ``{"type": "error", "error": {"type", "message"}, "request_id"}``;
  429 is ``rate_limit_error`` with a ``retry-after`` header (seconds), 500
  ``api_error``, 529 ``overloaded_error``; every answer has a ``request-id`` header.
* ``model``, ``max_tokens`` and ``messages`` are required (400 otherwise).
* With ``tools=[{name, input_schema}]`` and ``tool_choice={"type": "tool",
  "name"}`` the reply's ``content`` is a list holding a ``tool_use`` block
  (``id``, ``name``, ``input``) and ``stop_reason`` is ``tool_use``; ``usage``
  has ``input_tokens``/``output_tokens``. A cut-off reply has ``stop_reason:
  max_tokens``; a refusal ``stop_reason: refusal``.

Not reproduced: streaming, system prompt caching, multi-turn tool results.
Standalone: ``cd tests && python -m simulators.anthropic``.
"""

from __future__ import annotations

import json
from typing import Any

from .scripted import Fault, JudgeHandler, Recorded, serve_standalone, user_message_of

PATH = "/v1/messages"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

_DEFAULT_MESSAGES = {
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}


def error_body(status: int, message: str, request_id: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


class AnthropicHandler(JudgeHandler):
    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        request_id = f"req_sim{len(self.brain.requests)}"
        self.send_json(
            status,
            error_body(status, message, request_id),
            headers={"request-id": request_id, **(headers or {})},
        )

    def answer(self, recorded: Recorded, fault: Fault | None) -> None:
        if recorded.path.split("?", 1)[0] != PATH:
            self._error(404, f"Not found: {recorded.path}")
            return
        key = recorded.headers.get("x-api-key", "")
        if not key:
            self._error(401, "x-api-key header is required")
            return
        expected = self.brain.api_key
        if expected is not None and key != expected:
            self._error(401, "invalid x-api-key")
            return
        if not recorded.headers.get("anthropic-version"):
            self._error(400, "anthropic-version: header is required")
            return
        if fault is not None and fault.kind == "status":
            headers = {"retry-after": fault.retry_after} if fault.retry_after is not None else None
            message = fault.message or _DEFAULT_MESSAGES.get(fault.code, "Error")
            self._error(fault.code, message, headers)
            return
        body = recorded.json
        if not isinstance(body, dict):
            self._error(400, "The request body is not valid JSON.")
            return
        for required in ("model", "max_tokens", "messages"):
            if required not in body:
                self._error(400, f"{required}: Field required")
                return
        user = user_message_of(body.get("messages"))
        if user is None:
            self._error(400, "messages: at least one user message is required")
            return
        tools = body.get("tools") or []
        choice = body.get("tool_choice") or {}
        tool_names = [tool.get("name") for tool in tools if isinstance(tool, dict)]
        forced = choice.get("name") if choice.get("type") == "tool" else None
        if forced is not None and forced not in tool_names:
            self._error(400, f"tool_choice: tool {forced!r} not found in tools")
            return

        verdict = self.verdict_for(user, fault)
        name = forced or (tool_names[0] if tool_names else None)
        tool_input: Any = verdict.as_json()
        stop = "tool_use"
        content: list[dict[str, Any]]
        if fault is not None and fault.kind == "malformed":
            try:
                tool_input = json.loads(fault.content or "")
            except ValueError:
                name = None  # the "model" answered in prose instead of calling the tool
        if fault is not None and fault.kind == "refusal":
            content, stop = [], "refusal"
        elif fault is not None and fault.kind == "truncated":
            content, stop = [{"type": "text", "text": '{"label": "supp'}], "max_tokens"
        elif name is None:
            text = fault.content if fault is not None and fault.content else json.dumps(tool_input)
            content, stop = [{"type": "text", "text": text}], "end_turn"
        else:
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_sim{len(self.brain.requests)}",
                    "name": name,
                    "input": tool_input,
                }
            ]
        request_id = f"req_sim{len(self.brain.requests)}"
        self.send_json(
            200,
            {
                "id": f"msg_sim{len(self.brain.requests)}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": len(user.split()),
                    "output_tokens": len(json.dumps(content).split()),
                },
            },
            headers={"request-id": request_id},
        )


if __name__ == "__main__":
    serve_standalone(AnthropicHandler, "anthropic")
