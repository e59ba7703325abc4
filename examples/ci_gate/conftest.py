"""This example's cassette folder and settings (see docs/plugin.md, "Overriding fixtures").

The cassettes and the embedding cache are committed under ``cassettes/`` beside
this file, so ``pytest examples/boiling_point`` replays with no key, no network
and no torch. The pages were recorded through the Crawlbase Crawling API, so the
fetcher is pinned to ``crawlbase``: without the pin, a run without
``CRAWLBASE_TOKEN`` would fetch directly and look for other page cassettes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_citations import Settings, Verifier
    from pytest_citations.cassettes import CassetteRecorder
    from pytest_citations.judge import Judge
    from pytest_citations.retrieval import Embedder

CASSETTES = Path(__file__).resolve().parent / "cassettes"
FETCHER = "crawlbase"


@pytest.fixture(scope="session")
def citations_cassette_dir() -> Path:
    return CASSETTES


@pytest.fixture(scope="session")
def citations_settings(pytestconfig: pytest.Config, citations_settings: Settings) -> Settings:
    """The plugin's settings (command line > environment > ini), with this example's
    embedding cache and fetcher unless the environment or command line names others."""
    update: dict[str, Any] = {}
    if not os.environ.get("CITATIONS_EMBEDDING_CACHE"):
        update["embedding_cache_dir"] = CASSETTES / "embeddings"
    if not (pytestconfig.getoption("citations_fetcher") or os.environ.get("CITATIONS_FETCHER")):
        update["fetcher"] = FETCHER
    return citations_settings.model_copy(update=update)


# pytest builds a session fixture once per definition, for whichever folder asks
# first. Under `pytest examples` the plugin's own recorder and verifier would
# then serve all three examples from the first example's cassette folder, so
# each example builds its own two.
@pytest.fixture(scope="session")
def citations_recorder(
    citations_cassette_dir: Path, citations_record_mode: str, citations_settings: Settings
) -> CassetteRecorder:
    from pytest_citations.cassettes import CassetteRecorder, known_secrets

    return CassetteRecorder(
        citations_cassette_dir,
        record_mode=citations_record_mode,
        secrets=known_secrets(citations_settings),
        allow_private_hosts=citations_settings.allow_private_hosts,
    )


@pytest.fixture(scope="session")
def citations_verifier(
    citations_settings: Settings,
    citations_embedder: Embedder | None,
    citations_judge: Judge | None,
    citations_recorder: CassetteRecorder,
) -> Verifier:
    from pytest_citations.pipeline import Verifier

    return Verifier(
        citations_settings,
        embedder=citations_embedder,
        judge=citations_judge,
        recorder=citations_recorder,
    )
