"""Seed 003's walk-through runs from this folder.

The source is a local document, ``rfc7519.txt`` beside this file, so no page is
fetched over the network: the committed cassettes are the judge's answers
(``cassettes/judge/``). Every test runs in this folder and cites the file as
``rfc7519.txt``, like seed 003 does: the citation, and so its cassette name, is
the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _cite_from_this_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test here, so ``rfc7519.txt`` names the shipped copy of the RFC."""
    monkeypatch.chdir(HERE)
