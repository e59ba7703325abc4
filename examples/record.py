"""Re-record an example's cassettes against the local simulators, then check the replay.

    .venv/bin/python examples/record.py                  # every example
    .venv/bin/python examples/record.py boiling_point    # one

What it does, per example:

1. starts the Crawlbase Crawling API simulator (``tests/simulators/crawlbase.py``,
   whose default targets are seed 000's example.com pages, plus any page under
   ``<example>/site/``: ``site/docs/x.md`` is served as ``https://example.com/docs/x``)
   and the OpenAI-compatible judge simulator, scripted from ``<example>/judge_script.json``;
2. deletes ``<example>/cassettes/{pages,judge,storage,embeddings}`` and runs
   ``pytest examples/<example> --citations-record-mode=all`` with
   ``CRAWLBASE_API_URL``/``OPENAI_BASE_URL`` pointing at the simulators and their
   fake keys, so every page, judge answer and embedding is recorded afresh
   (embeddings with the real all-MiniLM-L6-v2, which must be installed);
3. stops the simulators and replays with ``CI=true`` and no key, which must pass
   (``ci_gate`` also rewrites its ``baseline.json`` from that replay).

The judge's answers recorded this way are SCRIPTED FIXTURES, not model traces.
To record with a real model and the real Crawlbase API instead, see each
example's README (``CRAWLBASE_TOKEN=… OPENAI_API_KEY=… pytest examples/<name>
--citations-record-mode=all``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NAMES = ("rfc7519", "boiling_point", "ci_gate")
SITE = "https://example.com"
RECORDED = ("pages", "judge", "storage", "embeddings")
#: Variables of the caller's environment that must not reach the recording run.
CLEARED_PREFIXES = ("CITATIONS_", "CRAWLBASE_", "OPENAI_", "ANTHROPIC_", "JUDGE_", "OLLAMA_")

sys.path.insert(0, str(ROOT / "tests"))

from simulators.crawlbase import NORMAL_TOKEN, Target, default_targets, start_crawlbase  # noqa: E402
from simulators.openai import OpenAIHandler  # noqa: E402
from simulators.scripted import FAKE_KEY, JudgeSimulator, ScriptedJudge  # noqa: E402


def site_targets(example: Path) -> dict[str, Target]:
    """``<example>/site/a/b.md`` → ``https://example.com/a/b`` served as that Markdown."""
    site = example / "site"
    targets = {}
    for page in sorted(site.rglob("*.md")) if site.is_dir() else []:
        path = page.relative_to(site).with_suffix("").as_posix()
        targets[f"{SITE}/{path}"] = Target(markdown=page.read_text(encoding="utf-8"))
    return targets


def script_judge(brain: ScriptedJudge, example: Path) -> int:
    """Script one reply per claim from ``judge_script.json``.

    Keys are claims, or citation ids of ``citations.json`` (the RFC example).
    """
    script = json.loads((example / "judge_script.json").read_text(encoding="utf-8"))
    claims: dict[str, str] = {}
    citations = example / "citations.json"
    if citations.exists():
        claims = {c["id"]: c["claim"] for c in json.loads(citations.read_text(encoding="utf-8"))}
    count = 0
    for key, reply in script.items():
        if key.startswith("_"):
            continue
        brain.reply(
            claims.get(key, key), reply["label"], reply["evidence_quote"], reply["confidence"]
        )
        count += 1
    return count


def clean_environment() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name != "CI" and not name.startswith(CLEARED_PREFIXES)
    }
    env.pop("PYTEST_ADDOPTS", None)
    return env


def pytest_command(name: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", f"examples/{name}", "-p", "no:cacheprovider", *extra]


def record(name: str) -> None:
    example = EXAMPLES / name
    cassettes = example / "cassettes"
    for folder in RECORDED:
        shutil.rmtree(cassettes / folder, ignore_errors=True)
    targets = {**default_targets(), **site_targets(example)}
    crawlbase = start_crawlbase(targets)
    judge = JudgeSimulator(OpenAIHandler).start()
    try:
        replies = script_judge(judge.brain, example)
        env = clean_environment()
        env.update(
            CRAWLBASE_API_URL=crawlbase.url + "/",
            CRAWLBASE_TOKEN=NORMAL_TOKEN,
            OPENAI_BASE_URL=judge.url + "/v1",
            OPENAI_API_KEY=FAKE_KEY,
            JUDGE_PROVIDER="openai",
        )
        print(
            f"== recording {name}: Crawlbase simulator {crawlbase.url}, "
            f"judge simulator {judge.url} ({replies} scripted replies)",
            flush=True,
        )
        result = subprocess.run(
            pytest_command(name, "--citations-record-mode=all", "-q"), cwd=ROOT, env=env
        )
        if result.returncode != 0:
            raise SystemExit(f"recording {name} failed (exit {result.returncode})")
        print(
            f"   judge calls: {len(judge.brain.requests)}; "
            f"Crawling API calls: {len(crawlbase.state.requests)}",
            flush=True,
        )
    finally:
        crawlbase.stop()
        judge.stop()


def replay(name: str) -> None:
    env = clean_environment()
    env["CI"] = "true"
    extra = ["-q"]
    if name == "ci_gate":
        extra.append(f"--citations-report={EXAMPLES / 'ci_gate' / 'baseline.json'}")
    print(f"== replaying {name} with CI=true and no keys", flush=True)
    result = subprocess.run(pytest_command(name, *extra), cwd=ROOT, env=env)
    if result.returncode != 0:
        raise SystemExit(f"replaying {name} failed (exit {result.returncode})")


def main(argv: list[str]) -> int:
    names = argv or list(NAMES)
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        print(f"unknown example(s): {', '.join(unknown)}; choose from {', '.join(NAMES)}")
        return 2
    for name in names:
        record(name)
        replay(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
