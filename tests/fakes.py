"""Shared test doubles and fixtures data for the doors (batch, audit, service, CLI).

``FakeEmbedder`` is deterministic and instant, so these tests never import torch:
a text's vector is its bag of lower-cased words hashed into 64 buckets.

``seed_records`` builds a batch shaped like seed 000's fixture over the local
website simulator: nine citations, two supported, three unreachable, so the run
prints ``citation_precision=0.2222 (2/9)`` and ``reachable_precision=0.3333 (2/6)``.
The judge verdicts are scripted fixtures (``script_seed_judge``), not model traces.

Run as a script (``python tests/fakes.py batch ...``) it is the ``citations``
command with the fake embedder, for tests that start a real subprocess.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BOILING_CLAIM = "Water boils at 100 degrees Celsius at sea level."
BOILING_SENTENCE = "Water boils at 100 degrees Celsius at sea level."
WRONG_BOILING_CLAIM = "Water boils at 50 degrees Celsius at sea level."
JWT_CLAIM = "A JWT is a compact, URL-safe means of representing claims between two parties."
JWT_SENTENCE = (
    "A JSON Web Token (JWT) is a compact, URL-safe means of representing claims "
    "to be transferred between two parties."
)
FLYING_CLAIM = "Cats can fly at sea level."

_WORD = re.compile(r"[a-z0-9]+")


class FakeEmbedder:
    """Bag-of-words vectors in 64 buckets: similar wording, similar vectors."""

    name = "fake-bag-of-words-64"

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        vectors = []
        for text in texts:
            vector = [0.0] * 64
            for word in _WORD.findall(text.lower()):
                bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:2], "big") % 64
                vector[bucket] += 1.0
            vectors.append(vector)
        return vectors


def seed_records(site: str) -> list[dict[str, Any]]:
    """Four claims, nine citations over the website simulator at ``site``."""
    return [
        {
            "id": "boil",
            "claim": BOILING_CLAIM,
            "urls": [f"{site}/articles/water-boiling-point", f"{site}/old-report"],
        },
        {
            "id": "boil-50",
            "claim": WRONG_BOILING_CLAIM,
            "urls": [f"{site}/articles/water-boiling-point", f"{site}/retired"],
        },
        {
            "id": "jwt",
            "claim": JWT_CLAIM,
            "urls": [f"{site}/articles/jwt", f"{site}/missing-article"],
        },
        {
            "id": "cats",
            "claim": FLYING_CLAIM,
            "urls": [
                f"{site}/articles/moved",
                f"{site}/old-report",
                f"{site}/articles/http-404-explained",
            ],
        },
    ]


def script_seed_judge(brain: Any) -> None:
    """Scripted fixture verdicts for :func:`seed_records` (not model output)."""
    brain.reply(BOILING_CLAIM, "supported", BOILING_SENTENCE, 0.96)
    brain.reply(WRONG_BOILING_CLAIM, "contradicted", BOILING_SENTENCE, 0.93)
    brain.reply(JWT_CLAIM, "supported", JWT_SENTENCE, 0.9)
    brain.reply(FLYING_CLAIM, "not_found", None, 0.2)


def write_jsonl(path: Path, records: Sequence[dict[str, Any] | str]) -> Path:
    lines = [item if isinstance(item, str) else json.dumps(item) for item in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def judge_env(judge_url: str, key: str) -> dict[str, str]:
    """Environment for a ``citations`` subprocess: direct fetches, the OpenAI simulator."""
    return {
        "OPENAI_API_KEY": key,
        "OPENAI_BASE_URL": judge_url + "/v1",
        "JUDGE_PROVIDER": "openai",
        "CITATIONS_FETCHER": "direct",
        "CITATIONS_ALLOW_PRIVATE_HOSTS": "1",
        "CITATIONS_RETRIES": "0",
        "CITATIONS_TIMEOUT": "20",
    }


def kill_midway(
    child: subprocess.Popen[bytes], journal: Path, entries: int, timeout: float
) -> tuple[bytes, bytes]:
    """SIGKILL a ``citations batch`` child once its journal holds ``entries`` lines.

    Fails the test if the child ends first or makes no progress in ``timeout``
    seconds; returns what it wrote (stdout, stderr).
    """
    import pytest

    from pytest_citations.batch import Journal

    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if journal.exists() and len(Journal.read(journal).entries) >= entries:
                break
            if child.poll() is not None:
                pytest.fail(f"batch ended before the kill: {child.communicate()}")
            time.sleep(0.01)
        else:
            pytest.fail("the batch made no progress")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
        out, err = child.communicate()
    assert child.returncode == -signal.SIGKILL
    return out, err


def main(argv: Sequence[str] | None = None) -> int:
    """The ``citations`` command with :class:`FakeEmbedder` (no torch)."""
    from pytest_citations.cli import main as cli_main

    return cli_main(argv, embedder=FakeEmbedder())


if __name__ == "__main__":
    sys.exit(main())
