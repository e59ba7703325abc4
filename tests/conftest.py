"""Fixtures that start the local simulators (tests/simulators/), real HTTP on 127.0.0.1.

Judge simulators (``openai_sim``, ``anthropic_sim``, ``ollama_sim``) answer with
scripted fixtures, not model traces: script them through ``sim.brain`` (a
``ScriptedJudge``: ``.reply(...)``, ``.script``, ``.fail_next(Fault...)``,
``.requests``); the accepted key is ``simulators.scripted.FAKE_KEY``.

``website`` is a scripted origin site (``website.state.routes[path] = Route(...)``,
URLs are ``website.url + path``); ``crawlbase_api`` is the Crawling + Storage API
(script ``crawlbase_api.state.targets[url]``; settings
``crawlbase_api_url=crawlbase_api.url + "/"`` with ``simulators.crawlbase.NORMAL_TOKEN``).
Both are started once per session and reset for each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def openai_sim() -> Iterator[Any]:
    """An OpenAI chat-completions simulator; base URL for settings is ``sim.url + "/v1"``."""
    from simulators.openai import OpenAIHandler
    from simulators.scripted import JudgeSimulator

    with JudgeSimulator(OpenAIHandler) as sim:
        yield sim


@pytest.fixture
def anthropic_sim() -> Iterator[Any]:
    """An Anthropic Messages simulator; base URL for settings is ``sim.url``."""
    from simulators.anthropic import AnthropicHandler
    from simulators.scripted import JudgeSimulator

    with JudgeSimulator(AnthropicHandler) as sim:
        yield sim


@pytest.fixture
def ollama_sim() -> Iterator[Any]:
    """An Ollama /api/chat simulator; ``OLLAMA_HOST`` for settings is ``sim.url``."""
    from simulators.ollama import OllamaHandler
    from simulators.scripted import JudgeSimulator

    with JudgeSimulator(OllamaHandler) as sim:
        yield sim


@pytest.fixture
def judge() -> Iterator[Any]:
    """The OpenAI simulator scripted with seed 000's verdicts (``fakes.script_seed_judge``)."""
    from fakes import script_seed_judge
    from simulators.openai import OpenAIHandler
    from simulators.scripted import JudgeSimulator

    with JudgeSimulator(OpenAIHandler) as sim:
        script_seed_judge(sim.brain)
        yield sim


@pytest.fixture(scope="session")
def _website_server() -> Iterator[Any]:
    from simulators.website import start_website

    sim = start_website()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def website(_website_server: Any) -> Any:
    """The fixture website on 127.0.0.1, reset to ``default_routes()`` for each test."""
    _website_server.state.reset()
    return _website_server


@pytest.fixture(scope="session")
def _crawlbase_server() -> Iterator[Any]:
    from simulators.crawlbase import start_crawlbase

    sim = start_crawlbase()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def crawlbase_api(_crawlbase_server: Any) -> Any:
    """The Crawlbase API simulator, reset to ``default_targets()`` for each test."""
    _crawlbase_server.state.reset()
    return _crawlbase_server
