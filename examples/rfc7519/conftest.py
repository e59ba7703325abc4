"""This example's cassette folder and settings (see docs/plugin.md, "Overriding fixtures").

The source is a local document, ``rfc7519.txt`` beside this file, so no page is
fetched over the network: the committed cassettes are the judge's answers
(``cassettes/judge/``). Every test runs in this folder and cites the file as
``rfc7519.txt``, like seed 003 does: the citation, and so its cassette name,
is the same on every machine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_citations import Settings, Verifier
    from pytest_citations.cassettes import CassetteRecorder
    from pytest_citations.judge import Judge
    from pytest_citations.retrieval import Embedder

HERE = Path(__file__).resolve().parent
CASSETTES = HERE / "cassettes"


@pytest.fixture(scope="session")
def citations_cassette_dir() -> Path:
    return CASSETTES


@pytest.fixture(scope="session")
def citations_settings(citations_settings: Settings) -> Settings:
    """The plugin's settings (command line > environment > ini), with this example's
    embedding cache unless CITATIONS_EMBEDDING_CACHE names another."""
    if os.environ.get("CITATIONS_EMBEDDING_CACHE"):
        return citations_settings
    return citations_settings.model_copy(update={"embedding_cache_dir": CASSETTES / "embeddings"})


@pytest.fixture(autouse=True)
def _cite_from_this_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test here, so ``rfc7519.txt`` names the shipped copy of the RFC."""
    monkeypatch.chdir(HERE)


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
