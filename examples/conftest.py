"""Shared by the three examples (see docs/plugin.md, "Overriding fixtures").

Each example keeps its cassettes and embedding cache in ``<example>/cassettes``,
committed, so ``pytest examples`` replays with no key, no network and no torch.
The web pages were recorded through the Crawlbase Crawling API, so the fetcher is
pinned to ``crawlbase``: without the pin, a run without ``CRAWLBASE_TOKEN`` would
fetch directly and look for other page cassettes. (Local documents, as in
``rfc7519/``, are read from disk whatever the fetcher.)
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_citations import Settings

FETCHER = "crawlbase"


@pytest.fixture
def citations_cassette_dir(request: pytest.FixtureRequest) -> Path:
    """``<example>/cassettes``: each example folder is self-contained."""
    return Path(request.path).parent / "cassettes"


@pytest.fixture
def citations_settings(pytestconfig: pytest.Config, citations_settings: Settings) -> Settings:
    """The plugin's settings, with the fetcher pinned unless the command line or
    ``CITATIONS_FETCHER`` names another."""
    if pytestconfig.getoption("citations_fetcher") or os.environ.get("CITATIONS_FETCHER"):
        return citations_settings
    return _pinned(citations_settings)


@cache
def _pinned(settings: Settings) -> Settings:
    # Cached so every test of a folder shares one Settings, hence one Verifier
    # (pages fetched once, the embedder loaded once).
    return settings.model_copy(update={"fetcher": FETCHER})
