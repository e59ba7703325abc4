"""Ollama chat simulator: ``POST /api/chat`` on 127.0.0.1.

Replies are FIXTURES, NOT MODEL TRACES: verdicts come from a ScriptedJudge script
(:mod:`tests.simulators.scripted`), never from a model.

Documented behaviours reproduced (Ollama API docs, "Generate a chat completion"
and "Structured outputs"):

* No authentication: any or no ``Authorization`` header is accepted.
* ``format`` may be ``"json"`` or a JSON schema; the model output is then JSON
  text in ``message.content``.
* With ``stream: false`` the answer is one object: ``model``, ``created_at``,
  ``message {role: assistant, content}``, ``done: true``, ``done_reason``
  (``stop``, or ``length`` when cut off) and the duration/count fields.
* Errors are ``{"error": "<text>"}``: a missing model → 400 "model is required";
  an unknown model (``ScriptedJudge`` has no model list, so script it with
  ``Fault.status(404, message="model 'x' not found")``) → 404.

Deliberate difference: upstream streams NDJSON when ``stream`` is absent or
true; this simulator answers 400 instead, so a client that forgets
``stream: false`` fails loudly in tests.
Standalone: ``cd tests && python -m simulators.ollama``.
"""

from __future__ import annotations

import json
import time

from .scripted import Fault, JudgeHandler, Recorded, serve_standalone, user_message_of

PATH = "/api/chat"


class OllamaHandler(JudgeHandler):
    def answer(self, recorded: Recorded, fault: Fault | None) -> None:
        if recorded.path.split("?", 1)[0] != PATH:
            self.send_json(404, {"error": "404 page not found"})
            return
        if fault is not None and fault.kind == "status":
            headers = {"retry-after": fault.retry_after} if fault.retry_after is not None else None
            message = fault.message or ("server busy" if fault.code in (429, 503) else "error")
            self.send_json(fault.code, {"error": message}, headers=headers)
            return
        body = recorded.json
        if not isinstance(body, dict):
            self.send_json(400, {"error": "invalid JSON body"})
            return
        if not body.get("model"):
            self.send_json(400, {"error": "model is required"})
            return
        if body.get("stream") is not False:
            self.send_json(400, {"error": "simulator: only stream=false is reproduced"})
            return
        user = user_message_of(body.get("messages"))
        if user is None:
            self.send_json(400, {"error": "messages must hold a user message"})
            return

        verdict = self.verdict_for(user, fault)
        content = json.dumps(verdict.as_json())
        done_reason = "stop"
        if fault is not None and fault.kind == "malformed":
            content = fault.content or ""
        elif fault is not None and fault.kind == "truncated":
            content, done_reason = content[:20], "length"
        self.send_json(
            200,
            {
                "model": body["model"],
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "message": {"role": "assistant", "content": content},
                "done_reason": done_reason,
                "done": True,
                "total_duration": 1_000_000,
                "load_duration": 100_000,
                "prompt_eval_count": len(user.split()),
                "prompt_eval_duration": 100_000,
                "eval_count": len(content.split()),
                "eval_duration": 500_000,
            },
        )


if __name__ == "__main__":
    serve_standalone(OllamaHandler, "ollama")
