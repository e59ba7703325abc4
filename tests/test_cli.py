"""The ``citations`` command: replay, audit listing, exit codes and error lines."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeEmbedder, write_jsonl
from simulators._server import Simulator
from simulators.crawlbase import JS_TOKEN, NORMAL_TOKEN
from simulators.scripted import FAKE_KEY, JudgeSimulator

from pytest_citations.cli import main

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SITE = "https://example.com"
SEED_LINES = "citation_precision=0.2222 (2/9)\nreachable_precision=0.3333 (2/6)\n"
_VARIABLES = (
    "CRAWLBASE_TOKEN",
    "CRAWLBASE_JS_TOKEN",
    "CRAWLBASE_API_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "JUDGE_PROVIDER",
    "CITATIONS_FETCHER",
    "BATCH_CONCURRENCY",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _run(argv: list[str], **kwargs: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdout=out, stderr=err, **kwargs)
    return code, out.getvalue(), err.getvalue()


def _subprocess(
    argv: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in _VARIABLES}
    return subprocess.run(
        [sys.executable, "-m", "pytest_citations.cli", *argv],
        env={**clean, **env},
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def _crawlbase_env(monkeypatch: pytest.MonkeyPatch, api: Simulator, judge: JudgeSimulator) -> None:
    monkeypatch.setenv("CRAWLBASE_TOKEN", NORMAL_TOKEN)
    monkeypatch.setenv("CRAWLBASE_API_URL", api.url + "/")
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", judge.url + "/v1")


def _seed_via_crawlbase() -> list[dict[str, Any]]:
    """Seed 000's fixture pages as the Crawlbase simulator serves them."""
    return [
        {
            "id": "boil",
            "claim": "Water boils at 100 degrees Celsius at sea level.",
            "urls": [f"{SITE}/articles/water-boiling-point", f"{SITE}/old-report"],
        },
        {
            "id": "boil-50",
            "claim": "Water boils at 50 degrees Celsius at sea level.",
            "urls": [f"{SITE}/articles/water-boiling-point", f"{SITE}/retired"],
        },
        {
            "id": "short",
            "claim": "Water boils at 100 degrees Celsius at sea level.",
            "urls": [f"{SITE}/short-note", f"{SITE}/missing-article"],
        },
        {
            "id": "cats",
            "claim": "Cats can fly at sea level.",
            "urls": [
                f"{SITE}/articles/moved",
                f"{SITE}/old-report",
                f"{SITE}/articles/http-404-explained",
            ],
        },
    ]


# --------------------------------------------------------- batch → audit → replay (Crawlbase)


def test_batch_audit_and_replay_through_the_crawlbase_simulator(
    tmp_path: Path,
    crawlbase_api: Simulator,
    judge: JudgeSimulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _crawlbase_env(monkeypatch, crawlbase_api, judge)
    source = write_jsonl(tmp_path / "in.jsonl", _seed_via_crawlbase())
    report = tmp_path / "report.csv"
    code, stdout, stderr = _run(
        ["batch", str(source), "--out", str(report), "--json", str(tmp_path / "r.json")],
        embedder=FakeEmbedder(),
    )
    # boil#0 supported, boil-50#0 contradicted, short#0 supported (after the
    # readability retry), three unreachable
    assert code == 0, stderr
    assert stdout == SEED_LINES
    for path in (report, tmp_path / "r.json"):
        assert NORMAL_TOKEN not in path.read_text()

    db = tmp_path / "citations-audit.sqlite3"
    code, listing, _ = _run(["audit", "--db", str(db), "--json"])
    assert code == 0
    rows = [json.loads(line) for line in listing.splitlines()]
    assert len(rows) == 9
    assert all(NORMAL_TOKEN not in line for line in listing.splitlines())
    stored = [row for row in rows if row["rid"]]
    assert stored, "Crawlbase stored pages must leave their rid in the audit index"
    boiling = next(row for row in stored if row["url"].endswith("/water-boiling-point"))

    code, page, stderr = _run(["replay", boiling["rid"]])
    assert code == 0, stderr
    assert "100 degrees Celsius" in page
    assert crawlbase_api.state.storage_reads[boiling["rid"]] == 1

    # either token reads any rid of the account
    monkeypatch.delenv("CRAWLBASE_TOKEN")
    monkeypatch.setenv("CRAWLBASE_JS_TOKEN", JS_TOKEN)
    out_file = tmp_path / "page.md"
    code, _, stderr = _run(["replay", boiling["rid"], "--out", str(out_file)])
    assert code == 0, stderr
    assert "100 degrees Celsius" in out_file.read_text()

    code, _, stderr = _run(["replay", "rid-9999"])
    assert code == 1
    assert "no stored page for rid 'rid-9999'" in stderr


def test_replay_without_any_token_names_crawlbase_token(tmp_path: Path) -> None:
    result = _subprocess(["replay", "rid-0001"], {}, tmp_path)
    assert result.returncode == 3
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "CRAWLBASE_TOKEN" in lines[0]
    assert "Traceback" not in result.stderr


# -------------------------------------------------------------------------- audit listing


def _filled_audit(path: Path) -> None:
    from pytest_citations.audit import AuditLog
    from pytest_citations.models import CitationVerdict, ClaimVerdict

    log = AuditLog(path)
    verdict = ClaimVerdict(
        claim="Water boils at 100 degrees Celsius at sea level.",
        label="supported",
        citations=[
            CitationVerdict(url=f"{SITE}/a", label="supported", confidence=0.96, rid="rid-1"),
            CitationVerdict(url=f"{SITE}/b", label="unreachable", reason="http_404"),
        ],
    )
    log.record("old-run", verdict, timestamp="2024-01-01T00:00:00.000000+00:00")
    log.record("new-run", verdict)


def test_audit_lists_a_table_and_filters(tmp_path: Path) -> None:
    db = tmp_path / "audit.sqlite3"
    _filled_audit(db)
    code, table, _ = _run(["audit", "--db", str(db)])
    assert code == 0
    lines = table.splitlines()
    assert lines[0].split() == [
        "timestamp", "run_id", "label", "conf", "reason", "rid", "url", "claim",
    ]  # fmt: skip
    assert set(lines[1]) <= {"-", " "}
    assert lines[-1] == "(4 rows)"
    assert "rid-1" in table and "http_404" in table and "0.96" in table

    code, listing, _ = _run(["audit", "--db", str(db), "--json", "--label", "unreachable"])
    rows = [json.loads(line) for line in listing.splitlines()]
    assert [row["label"] for row in rows] == ["unreachable", "unreachable"]

    code, listing, _ = _run(["audit", "--db", str(db), "--json", "--since", "2024-06-01"])
    assert {json.loads(line)["run_id"] for line in listing.splitlines()} == {"new-run"}

    code, listing, _ = _run(["audit", "--db", str(db), "--json", "--run", "old-run"])
    assert len(listing.splitlines()) == 2


def test_audit_default_path_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, stderr = _run(["audit"])
    assert code == 2 and "no audit index at citations-audit.sqlite3" in stderr
    _filled_audit(tmp_path / "citations-audit.sqlite3")
    code, table, _ = _run(["audit"])
    assert code == 0 and "(4 rows)" in table
    code, _, stderr = _run(["audit", "--since", "yesterday"])
    assert code == 2 and "--since" in stderr


# ------------------------------------------------------------------ exit codes and errors


def test_configuration_error_is_one_line_with_exit_3(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "claim": "c", "urls": ["u"]}])
    result = _subprocess(["batch", str(source)], {"JUDGE_PROVIDER": "bogus"}, tmp_path)
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "JUDGE_PROVIDER" in lines[0] and "Traceback" not in result.stderr


def test_invalid_number_setting_names_the_variable(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "claim": "c", "urls": ["u"]}])
    result = _subprocess(["batch", str(source)], {"BATCH_CONCURRENCY": "zero"}, tmp_path)
    assert result.returncode == 3
    assert "BATCH_CONCURRENCY" in result.stderr and "Traceback" not in result.stderr


def test_missing_input_and_bad_flags_are_usage_errors(tmp_path: Path) -> None:
    code, _, stderr = _run(["batch", str(tmp_path / "nope.jsonl")])
    assert code == 2 and "no such input file" in stderr
    with pytest.raises(SystemExit) as exit_info:
        _run(["batch", "x.jsonl", "--concurrency", "0"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        _run(["batch", "x.jsonl", "--resume", "--restart"])
    assert exit_info.value.code == 2


def test_serve_without_fastapi_prints_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi -> ImportError
    code, _, stderr = _run(["serve", "--port", "1"])
    assert code == 3
    assert "pip install 'pytest-citations[server]'" in stderr


def test_the_command_imports_only_the_standard_library() -> None:
    probe = (
        "import sys, pytest_citations.cli as c; c.build_parser(); "
        "heavy = {'pydantic', 'httpx', 'fastapi', 'uvicorn', 'torch', 'vcr', 'yaml'}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_console_script_help_lists_the_commands(tmp_path: Path) -> None:
    result = _subprocess(["--help"], {}, tmp_path)
    assert result.returncode == 0
    for command in ("batch", "replay", "audit", "serve"):
        assert command in result.stdout
    assert "Exit codes" in result.stdout
