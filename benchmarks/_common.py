"""Shared helpers for the benchmarks: paths, simulators, generated suites, timing.

The benchmarks are scripts that print figures, not timed tests. Each prints one
summary line starting with ``BENCH`` (``BENCH <name> key=value ...``) that
``run_all.py`` (or any script) can read, then detail lines.

The simulators under ``tests/simulators`` serve scripted pages and scripted judge
verdicts: FIXTURES, NOT MODEL TRACES. Nothing here measures a language model.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PYTHON = sys.executable

if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # ``simulators`` and ``fakes`` live there

#: Modules a citation-free pytest run (and a warm replay) must never import.
HEAVY_MODULES = ("torch", "sentence_transformers", "transformers", "numpy")
#: Lighter modules reported for information (each costs tens of milliseconds).
REPORTED_MODULES = ("httpx", "pydantic", "vcr", "yaml", "trafilatura", "lxml")

FILLER_WORDS = [
    "the",
    "survey",
    "team",
    "recorded",
    "measurements",
    "across",
    "several",
    "coastal",
    "stations",
    "during",
    "a",
    "long",
    "season",
    "and",
    "compared",
    "every",
    "reading",
    "with",
    "archived",
    "values",
    "from",
    "earlier",
    "expeditions",
    "so",
    "that",
    "drift",
    "in",
    "the",
    "instruments",
    "could",
    "be",
    "corrected",
    "before",
    "the",
    "results",
    "were",
    "published",
    "in",
    "the",
    "annual",
    "report",
    "of",
    "the",
    "regional",
    "observatory",
]


def fact_sentence(i: int) -> str:
    """A claim sentence unique to item ``i`` (what the page states and the claim repeats)."""
    return f"Widget model {i} weighs exactly {i * 7 + 3} grams and ships in a blue box."


def filler_paragraph(seed: str, words: int) -> str:
    """Deterministic prose of ``words`` words; ``seed`` varies the order."""
    digest = hashlib.sha256(seed.encode()).digest()
    start = digest[0] % len(FILLER_WORDS)
    out = [
        FILLER_WORDS[(start + n * (1 + digest[1] % 5)) % len(FILLER_WORDS)] for n in range(words)
    ]
    return " ".join(out).capitalize() + "."


def article_html(title: str, paragraphs: Sequence[str]) -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{title}</title></head><body>"
        "<nav><a href='/'>Home</a> | <a href='/about'>About</a></nav>"
        f"<main><article><h1>{title}</h1>{body}</article></main>"
        "<footer><p>Copyright 2025 Example Widgets.</p></footer></body></html>"
    )


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def run(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 900,
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run a command, returning (wall seconds, completed process)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    start = time.perf_counter()
    proc = subprocess.run(
        list(cmd), env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    return time.perf_counter() - start, proc


def clean_env() -> dict[str, str]:
    """The environment minus every variable that changes what the pipeline does."""
    drop = {
        "CI",
        "CRAWLBASE_TOKEN",
        "CRAWLBASE_JS_TOKEN",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "JUDGE_PROVIDER",
        "JUDGE_MODEL",
        "CITATIONS_FETCHER",
        "CITATIONS_RECORD_MODE",
        "CITATIONS_EMBEDDING_CACHE",
        "PYTEST_ADDOPTS",
        "PYTEST_XDIST_WORKER",
    }
    return {k: v for k, v in os.environ.items() if k not in drop}


def bench_line(name: str, **fields: Any) -> str:
    parts = [f"BENCH {name}"]
    for key, value in fields.items():
        if isinstance(value, float):
            value = f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
        parts.append(f"{key}={value}")
    return " ".join(parts)


def ru_maxrss_mib(children: bool = False) -> float:
    import resource

    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux
