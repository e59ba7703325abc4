"""Shared set-up for the plugin's pytester tests (no tests here; imported by test_plugin.py).

The plugin is exercised from the outside, in real subprocesses
(``pytester.runpytest_subprocess``). The simulators run in the outer test
process; the inner suite reads their URLs from the environment, so stopping
them and pointing the URLs at a closed port proves a replay needs no network.

The inner suite's ``conftest.py`` overrides the ``citations_embedder`` fixture with
a tiny deterministic bag-of-words embedder: torch costs ~6 s per subprocess,
and the plugin's behaviour does not depend on which embedder ranks passages.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent

WATER_PATH = "/articles/water-boiling-point"
BOILING = "Water boils at 100 degrees Celsius at sea level."
SUPPORTED_CLAIM = "Water boils at 100 degrees Celsius at sea level."
CONTRADICTED_CLAIM = "Water boils at 50 degrees Celsius at sea level."
UNSETTLED_CLAIM = "Water freezes at 0 degrees Celsius."

INNER_CONFTEST = f"""
import os
import sys

import pytest

sys.path.insert(0, {str(TESTS_DIR)!r})


@pytest.fixture(scope="session")
def citations_embedder():
    from fakes import FakeEmbedder  # deterministic bag-of-words vectors: no torch

    return FakeEmbedder()


@pytest.fixture(scope="session")
def site():
    return os.environ["CITE_SITE"]
"""


def closed_port_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@dataclass
class Sims:
    website: Any
    judge: Any

    @property
    def site(self) -> str:
        return str(self.website.url)


def script_judge(brain: Any) -> None:
    """Scripted fixture replies (not model traces) for the claims the inner tests use."""
    brain.reply(SUPPORTED_CLAIM, "supported", BOILING, 0.95)
    brain.reply(CONTRADICTED_CLAIM, "contradicted", BOILING, 0.9)
    brain.reply(UNSETTLED_CLAIM, "not_found", None, 0.4)


@contextmanager
def running_sims(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sims]:
    """Start the website and the OpenAI simulator and point the environment at them."""
    from simulators.openai import OpenAIHandler
    from simulators.scripted import FAKE_KEY, JudgeSimulator
    from simulators.website import start_website

    website = start_website()
    judge = JudgeSimulator(OpenAIHandler).start()
    script_judge(judge.brain)
    monkeypatch.setenv("CITE_SITE", website.url)
    monkeypatch.setenv("OPENAI_BASE_URL", judge.url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    try:
        yield Sims(website, judge)
    finally:
        website.stop()
        judge.stop()


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers gone, no keys: the inner suite can only replay."""
    dead = closed_port_url()
    monkeypatch.setenv("CITE_SITE", dead)
    monkeypatch.setenv("OPENAI_BASE_URL", dead + "/v1")
    for name in ("OPENAI_API_KEY", "CRAWLBASE_TOKEN", "CRAWLBASE_JS_TOKEN", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No outer CI flag, keys or citation settings leak into the inner run."""
    for name in list(os.environ):
        if name == "CI" or name.startswith(("CITATIONS_", "JUDGE_", "CRAWLBASE_", "OPENAI_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setenv("CITATIONS_ALLOW_PRIVATE_HOSTS", "1")
    monkeypatch.setenv("JUDGE_PROVIDER", "openai")


def setup_inner(pytester: pytest.Pytester, **test_files: str) -> None:
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(**test_files)


def files_text(root: Path) -> str:
    """Every file under ``root`` as text, for secret greps."""
    chunks = []
    for path in root.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            chunks.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(chunks)
