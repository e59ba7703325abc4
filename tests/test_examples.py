"""The examples run offline, as a newcomer runs them, and reproduce both seeds.

Each example runs in a real subprocess (``python -m pytest examples/<name>``)
with ``CI=true`` and no key in the environment, so the plugin only replays the
committed cassettes; ``-X importtime`` proves torch never loaded (the committed
embedding cache covered every text). The RFC example's table is rebuilt from
the JSON report with ``examples/rfc7519/table.py`` and compared with seed 003's
table row by row.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

#: Seed 003's table, as the seed prints it.
SEED_003_TABLE = """\
citation          quote         relation        conf  verdict       action
epoch_seconds     found         supports        0.93  verified        auto
aud_reject        found         supports        0.95  verified        auto
sig_reporting     missing       -                  -  fabricated      auto
clock_skew        found         supports        0.99  verified        auto
exp_required      found         contradicts     0.99  contradicted    auto
pii_encryption    found         says_nothing    0.27  unsupported   review
iat_future        section-only  says_nothing    0.56  unsupported   review
duplicate_names   found         supports        0.99  verified        auto"""

#: What each example ends with: pytest's outcome line and the summary's lines.
EXPECTED: dict[str, tuple[str, list[str]]] = {
    "rfc7519": (
        "7 passed, 2 xfailed",
        [
            "8 citation(s) of 8 claim(s) in 8 test(s): supported=4, contradicted=1, "
            "not_found=2, unreachable=0, fabricated=1",
            "citation_precision=0.5000 (4/8)",
            "reachable_precision=0.5000 (4/8)",
        ],
    ),
    "boiling_point": (
        "6 passed",
        [
            "9 citation(s) of 5 claim(s) in 5 test(s): supported=2, contradicted=1, "
            "not_found=3, unreachable=3, fabricated=0",
            "citation_precision=0.2222 (2/9)",
            "reachable_precision=0.3333 (2/6)",
        ],
    ),
    "ci_gate": (
        "1 passed, 1 xfailed",
        [
            "6 citation(s) of 6 claim(s) in 2 test(s): supported=5, contradicted=1, "
            "not_found=0, unreachable=0, fabricated=0",
            "citation_precision=0.8333 (5/6)",
            "reachable_precision=0.8333 (5/6)",
        ],
    ),
}

#: Top-level modules a replay must never import: the model stack.
HEAVY_MODULES = frozenset({"torch", "sentence_transformers", "transformers"})

_CLEARED = ("CITATIONS_", "CRAWLBASE_", "OPENAI_", "ANTHROPIC_", "JUDGE_", "OLLAMA_", "PYTEST_")


@dataclass
class Run:
    returncode: int
    stdout: str
    imported: set[str]  # every module imported, dotted names

    def imported_heavy(self) -> set[str]:
        return {name for name in self.imported if name.split(".")[0] in HEAVY_MODULES}


def offline_env() -> dict[str, str]:
    """The caller's environment minus every key and citation setting, with CI=true."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEARED)}
    env["CI"] = "true"
    return env


def run_example(*args: str) -> Run:
    command = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "pytest",
        *args,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        # importtime writes to file descriptor 2, which pytest's default fd capture
        # would swallow during the tests; sys-level capture leaves it alone.
        "--capture=sys",
    ]
    result = subprocess.run(
        command, cwd=ROOT, env=offline_env(), capture_output=True, text=True, timeout=300
    )
    imported, errors = set(), []
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            imported.add(line.rsplit("|", 1)[1].strip())
        else:
            errors.append(line)
    return Run(result.returncode, result.stdout + "\n".join(errors), imported)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Run, dict[str, Any]]]:
    """Each example once, with its JSON report (shared by the tests below)."""
    out = tmp_path_factory.mktemp("examples")
    results = {}
    for name in EXPECTED:
        report = out / f"{name}.json"
        run = run_example(f"examples/{name}", f"--citations-report={report}")
        data = json.loads(report.read_text()) if report.exists() else {}
        results[name] = (run, data)
    return results


@pytest.mark.parametrize("name", list(EXPECTED))
def test_example_replays_offline_and_prints_the_summary(
    runs: dict[str, tuple[Run, dict[str, Any]]], name: str
) -> None:
    run, report = runs[name]
    outcome, lines = EXPECTED[name]
    assert run.returncode == 0, run.stdout[-4000:]
    assert re.search(rf"\b{outcome} in [\d.]+s\b", run.stdout), run.stdout[-2000:]
    header = re.search(r"^=+ citations =+$", run.stdout, re.M)
    assert header, run.stdout[-2000:]
    summary = run.stdout[header.end() :]
    for line in lines:
        assert line in summary.splitlines()
    assert "requests: replayed=" in summary and " live=0" in summary
    assert report["record_mode"] == "none"
    assert report["summary"]["requests"]["live"] == 0


@pytest.mark.parametrize("name", list(EXPECTED))
def test_replay_never_imports_the_model(
    runs: dict[str, tuple[Run, dict[str, Any]]], name: str
) -> None:
    run, _ = runs[name]
    assert "pytest_citations.pipeline" in run.imported  # the import log was read
    if name != "rfc7519":  # quotes and sections only there: nothing is ranked
        assert "pytest_citations.retrieval" in run.imported  # passages were ranked...
    assert run.imported_heavy() == set()  # ...from the committed vectors alone


def test_the_rfc_table_command_reproduces_seed_003(
    runs: dict[str, tuple[Run, dict[str, Any]]], tmp_path: Path
) -> None:
    _, report = runs["rfc7519"]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    result = subprocess.run(
        [sys.executable, "examples/rfc7519/table.py", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.rstrip("\n") == SEED_003_TABLE


def test_all_examples_in_one_session_keep_their_own_cassettes() -> None:
    """``scripts/examples`` runs ``pytest examples``: three cassette folders, one session."""
    run = run_example("examples")
    assert run.returncode == 0, run.stdout[-4000:]
    assert re.search(r"\b14 passed, 3 xfailed in ", run.stdout)
    assert "23 citation(s) of 19 claim(s) in 15 test(s)" in run.stdout
    assert run.imported_heavy() == set()


def test_ci_gate_session_floor() -> None:
    passing = run_example("examples/ci_gate", "--citations-floor=0.8")
    assert passing.returncode == 0, passing.stdout[-3000:]
    failing = run_example("examples/ci_gate", "--citations-floor=0.9")
    assert failing.returncode == 1
    assert (
        "FAILED citations floor: citation_precision=0.8333 (5/6) is below "
        "--citations-floor=0.9" in failing.stdout
    )


def test_ci_gate_baseline() -> None:
    baseline = "--citations-baseline=examples/ci_gate/baseline.json"
    same = run_example("examples/ci_gate", baseline)
    assert same.returncode == 0, same.stdout[-3000:]
    assert "citation_precision: 0.8333 -> 0.8333 (+0.0000)" in same.stdout
    regression = run_example("examples/ci_gate", "-k", "v2", baseline)
    assert regression.returncode == 1
    assert (
        "FAILED citations baseline: citation_precision dropped from 0.8333 to 0.6667"
        in regression.stdout
    )


# -- what is committed ----------------------------------------------------------------

_SECRET_PATTERNS = [
    re.compile(r"sk-[A-Za-z0-9_-]{8,}"),  # OpenAI-style keys
    re.compile(r"sk-ant-[A-Za-z0-9_-]{8,}"),
    re.compile(r"[?&](?:token|api_key|apikey|access_token|key)=(?!<scrubbed>)[^&\s'\"]+", re.I),
    re.compile(r"Bearer\s+[A-Za-z0-9._-]{8,}"),
    re.compile(
        r"^\s*(?:authorization|x-api-key|api-key|cookie):\s*\n\s*-\s*(?!<scrubbed>)\S", re.I | re.M
    ),
]


def _committed_files() -> list[Path]:
    return [
        path
        for path in sorted(EXAMPLES.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".txt"
    ]


def test_no_secret_in_committed_cassettes_or_reports() -> None:
    from simulators.crawlbase import JS_TOKEN, NORMAL_TOKEN
    from simulators.scripted import FAKE_KEY

    cassettes = [p for p in _committed_files() if p.suffix in (".yaml", ".json")]
    assert any("cassettes" in p.parts for p in cassettes)
    for path in cassettes:
        text = path.read_text(encoding="utf-8")
        for value in (NORMAL_TOKEN, JS_TOKEN, FAKE_KEY):
            assert value not in text, f"{path} holds a simulator key"
        for pattern in _SECRET_PATTERNS:
            match = pattern.search(text)
            assert match is None, f"{path}: secret-looking {match.group(0)!r}"


@pytest.mark.parametrize("name", list(EXPECTED))
def test_scripted_replies_are_labelled_as_fixtures(name: str) -> None:
    """Judge answers recorded from the simulator are never presented as model traces."""
    for readme in (EXAMPLES / name / "README.md", EXAMPLES / name / "cassettes" / "README.md"):
        text = " ".join(readme.read_text(encoding="utf-8").split()).lower()
        assert "not model traces" in text, readme
