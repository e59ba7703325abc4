"""A scripted judge brain shared by the OpenAI, Anthropic and Ollama simulators.

Replies from these simulators are FIXTURES, NOT MODEL TRACES: every verdict comes
from a script a test wrote, never from a language model. Label anything built on
them that way.

The brain reads the claim and passages back out of the user message
(:func:`pytest_citations.judge.render_user_message` layout), picks a verdict from
its script, and lets tests inject one fault per call:

    sim = JudgeSimulator(OpenAIHandler).start()         # or the *_sim fixtures
    brain = sim.brain                                   # a ScriptedJudge (== sim.state)
    brain.reply("Water boils at 100 C.", "supported", "boils at 100", 0.9)
    brain.script["Ice melts at 0 C."] = ("contradicted", "melts at 5", 0.8)
    brain.script = lambda claim, passages: Verdict("not_found", None, 0.2)
    brain.fail_next(Fault.status(429, retry_after="1"), Fault.malformed())
    brain.requests[-1].json["model"]                    # what the client sent

Faults are consumed first in, first out, one per received request; when none is
queued the scripted verdict is sent. The default verdict is (not_found, null, 0.3).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from ._server import QuietHandler, Simulator

#: The key the simulators accept unless a test sets another (``brain.api_key``).
FAKE_KEY = "sk-test-SECRET123"


@dataclass(frozen=True)
class Verdict:
    """A scripted judgement: what the fake model "answers"."""

    label: str
    evidence_quote: str | None = None
    confidence: float = 0.3

    def as_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "evidence_quote": self.evidence_quote,
            "confidence": self.confidence,
        }


DEFAULT_VERDICT = Verdict("not_found", None, 0.3)

FaultKind = Literal[
    "status", "malformed", "foreign_quote", "delay", "disconnect", "refusal", "truncated"
]


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour, for the next request the simulator receives.

    Build with the class methods; each names the documented behaviour it imitates.
    """

    kind: FaultKind
    code: int = 500
    retry_after: str | None = None
    content: str | None = None
    seconds: float = 0.0
    message: str | None = None

    @classmethod
    def status(
        cls, code: int, *, retry_after: str | None = None, message: str | None = None
    ) -> Fault:
        """An error answer in the provider's error shape (429, 500, 503, 529, 400, ...)."""
        return cls("status", code=code, retry_after=retry_after, message=message)

    @classmethod
    def malformed(cls, content: str = '{"label": "supported", "confidence":') -> Fault:
        """A 200 whose model output is not a valid judgement (default: cut-off JSON).

        For Anthropic the content replaces the tool input: if it parses as JSON it
        is sent as the input, otherwise a text block replaces the tool_use block.
        """
        return cls("malformed", content=content)

    @classmethod
    def foreign_quote(cls, quote: str = "a sentence that appears on no page") -> Fault:
        """A well-formed supported verdict whose quote is not in the passages."""
        return cls("foreign_quote", content=quote)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Answer normally, but only after ``seconds`` (to trip client timeouts)."""
        return cls("delay", seconds=seconds)

    @classmethod
    def disconnect(cls) -> Fault:
        """Close the connection without answering (a connection error for the client)."""
        return cls("disconnect")

    @classmethod
    def refusal(cls, message: str = "I'm sorry, I can't help with that.") -> Fault:
        """OpenAI: ``message.refusal`` set; Anthropic: ``stop_reason: refusal``."""
        return cls("refusal", message=message)

    @classmethod
    def truncated(cls) -> Fault:
        """Output cut at the token limit (finish_reason/done_reason length, max_tokens)."""
        return cls("truncated")


@dataclass(frozen=True)
class Recorded:
    """One request as the simulator received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    json: Any


Script = Mapping[str, Verdict | tuple[Any, ...]] | Callable[[str, list[str]], Any]

_CLAIM = re.compile(r"\AClaim:\n(?P<claim>.*?)\n\nPassages:\n(?P<passages>.*)\Z", re.S)
_PASSAGE = re.compile(r"(?:\A|\n\n)\[(\d+)\] ")


def parse_user_message(text: str) -> tuple[str, list[str]]:
    """(claim, passages) back out of ``render_user_message``'s layout."""
    match = _CLAIM.match(text)
    if match is None:
        return text, []
    raw = match.group("passages")
    if raw == "(no passages)":
        return match.group("claim"), []
    pieces = _PASSAGE.split(raw)
    # split gives ["", "1", "text", "2", "text", ...]
    passages = [pieces[index] for index in range(2, len(pieces), 2)]
    return match.group("claim"), passages


@dataclass
class ScriptedJudge:
    """The state a judge simulator serves from. Thread-safe: the server is threaded."""

    script: Script = field(default_factory=dict)
    default: Verdict = DEFAULT_VERDICT
    #: The key the simulator accepts; None accepts any non-empty key.
    api_key: str | None = FAKE_KEY
    faults: deque[Fault] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fail_next(self, *faults: Fault) -> None:
        """Queue faults, one per coming request, in order."""
        with self._lock:
            self.faults.extend(faults)

    def reply(
        self, claim: str, label: str, quote: str | None = None, confidence: float = 0.9
    ) -> None:
        """Script the verdict for one claim (the script must be a dict)."""
        if not isinstance(self.script, dict):
            self.script = {}
        assert isinstance(self.script, dict)
        self.script[claim] = Verdict(label, quote, confidence)

    def record(self, handler: BaseHTTPRequestHandler, body: bytes) -> Recorded:
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        recorded = Recorded(
            method=handler.command,
            path=handler.path,
            headers={name.lower(): value for name, value in handler.headers.items()},
            body=body,
            json=payload,
        )
        with self._lock:
            self.requests.append(recorded)
        return recorded

    def next_fault(self) -> Fault | None:
        with self._lock:
            return self.faults.popleft() if self.faults else None

    def decide(self, user_message: str) -> Verdict:
        claim, passages = parse_user_message(user_message)
        script = self.script
        chosen: Any
        chosen = script(claim, passages) if callable(script) else script.get(claim, self.default)
        if chosen is None:
            return self.default
        if isinstance(chosen, Verdict):
            return chosen
        return Verdict(*chosen)

    def reset(self) -> None:
        with self._lock:
            self.faults.clear()
            self.requests.clear()
        self.script = {}
        self.default = DEFAULT_VERDICT


class JudgeSimulator(Simulator):
    """A :class:`Simulator` serving a :class:`ScriptedJudge`, quick to stop.

    ``serve_forever`` polls for shutdown every 0.5 s by default, which made every
    test's teardown wait half a second; 0.02 s keeps a suite of simulator tests fast.
    """

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], state: ScriptedJudge | None = None
    ) -> None:
        super().__init__(handler, state if state is not None else ScriptedJudge())
        server = self._server
        self._thread = threading.Thread(
            target=lambda: server.serve_forever(poll_interval=0.02), daemon=True
        )

    @property
    def brain(self) -> ScriptedJudge:
        brain: ScriptedJudge = self.state
        return brain


def serve_standalone(handler: type[BaseHTTPRequestHandler], name: str) -> None:
    """``cd tests && python -m simulators.<name>``: serve until Ctrl-C, printing the URL."""
    brain = ScriptedJudge()
    with JudgeSimulator(handler, brain) as sim:
        print(f"{name} simulator (scripted fixture replies, not a model) at {sim.url}")
        print(f"accepted key: {brain.api_key}")
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


class JudgeHandler(QuietHandler):
    """What the three judge simulators share: record, then apply delay/disconnect faults.

    Subclasses implement ``answer(recorded, fault)``; ``state`` is a ScriptedJudge.
    """

    server: Any  # _Server, whose ``state`` is the ScriptedJudge

    @property
    def brain(self) -> ScriptedJudge:
        brain: ScriptedJudge = self.server.state
        return brain

    def do_POST(self) -> None:
        recorded = self.brain.record(self, self.read_body())
        fault = self.brain.next_fault()
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.seconds)
            fault = None
        if fault is not None and fault.kind == "disconnect":
            self.close_connection = True
            return
        self.answer(recorded, fault)

    def do_GET(self) -> None:
        self.brain.record(self, b"")
        self.send_json(404, {"error": "not found"})

    def answer(self, recorded: Recorded, fault: Fault | None) -> None:
        raise NotImplementedError

    def verdict_for(self, user_message: str, fault: Fault | None) -> Verdict:
        verdict = self.brain.decide(user_message)
        if fault is not None and fault.kind == "foreign_quote":
            return Verdict("supported", fault.content, 0.95)
        return verdict


def user_message_of(messages: Any) -> str | None:
    """The last user message's text (string content or a list of text blocks)."""
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(
                    block.get("text", "")
                    for block in content
                    if isinstance(block, dict) and block.get("type") == "text"
                )
    return None
