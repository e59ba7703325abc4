# --- judge simulators (tests/simulators/{openai,anthropic,ollama}.py) -------------------
# Replies are scripted fixtures, not model traces. Each fixture yields a running
# ``JudgeSimulator``; script it through ``sim.brain`` (a ``ScriptedJudge``): ``.reply(...)``,
# ``.script``, ``.fail_next(Fault...)``, ``.requests``. Accepted key: ``FAKE_KEY``.
from collections.abc import Iterator as _JudgeIterator
from typing import Any as _JudgeAny

import pytest as _judge_pytest


@_judge_pytest.fixture
def openai_sim() -> _JudgeIterator[_JudgeAny]:
    """An OpenAI chat-completions simulator; base URL for settings is ``sim.url + "/v1"``."""
    from simulators.openai import OpenAIHandler
    from simulators.scripted import JudgeSimulator

    with JudgeSimulator(OpenAIHandler) as sim:
        yield sim


@_judge_pytest.fixture
def anthropic_sim() -> _JudgeIterator[_JudgeAny]:
    """An Anthropic Messages simulator; base URL for settings is ``sim.url``."""
    from simulators.anthropic import AnthropicHandler
    from simulators.scripted import JudgeSimulator

    with JudgeSimulator(AnthropicHandler) as sim:
        yield sim


@_judge_pytest.fixture
def ollama_sim() -> _JudgeIterator[_JudgeAny]:
    """An Ollama /api/chat simulator; ``OLLAMA_HOST`` for settings is ``sim.url``."""
    from simulators.ollama import OllamaHandler
    from simulators.scripted import JudgeSimulator

    with JudgeSimulator(OllamaHandler) as sim:
        yield sim


# --- fetch simulators (tests/simulators/{website,crawlbase}.py) ---------------------------
# ``website``: a scripted origin site; add pages with ``website.state.routes[path] = Route(...)``
# (or ``html_page(title, body_html)``); URLs are ``website.url + path``.
# ``crawlbase_api``: the Crawling + Storage API; script ``crawlbase_api.state.targets[url]``;
# settings: ``crawlbase_api_url=crawlbase_api.url + "/"``,
# token ``simulators.crawlbase.NORMAL_TOKEN`` (JS token ``JS_TOKEN``).
from collections.abc import Iterator as _FetchIterator  # noqa: E402
from typing import Any as _FetchAny  # noqa: E402

import pytest as _fetch_pytest  # noqa: E402


@_fetch_pytest.fixture(scope="session")
def _website_server() -> _FetchIterator[_FetchAny]:
    from simulators.website import start_website

    sim = start_website()
    try:
        yield sim
    finally:
        sim.stop()


@_fetch_pytest.fixture
def website(_website_server: _FetchAny) -> _FetchAny:
    """The fixture website on 127.0.0.1, reset to ``default_routes()`` for each test."""
    _website_server.state.reset()
    return _website_server


@_fetch_pytest.fixture(scope="session")
def _crawlbase_server() -> _FetchIterator[_FetchAny]:
    from simulators.crawlbase import start_crawlbase

    sim = start_crawlbase()
    try:
        yield sim
    finally:
        sim.stop()


@_fetch_pytest.fixture
def crawlbase_api(_crawlbase_server: _FetchAny) -> _FetchAny:
    """The Crawlbase API simulator, reset to ``default_targets()`` for each test."""
    _crawlbase_server.state.reset()
    return _crawlbase_server
