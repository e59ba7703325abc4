"""The pytest plugin, from the outside: real pytest subprocesses against the simulators."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_plugin_support import (
    BOILING,
    CONTRADICTED_CLAIM,
    SUPPORTED_CLAIM,
    UNSETTLED_CLAIM,
    WATER_PATH,
    clean_environment,
    files_text,
    offline,
    running_sims,
    setup_inner,
)

pytest_plugins = ["pytester"]

BASIC = f"""
import pytest

WATER = "{WATER_PATH}"


def test_supported(verify_citation, site):
    verdict = verify_citation({SUPPORTED_CLAIM!r}, [site + WATER, site + "/old-report"])
    assert verdict == "supported"


def test_contradicted(verify_citation, site):
    assert verify_citation({CONTRADICTED_CLAIM!r}, [site + WATER]) == "contradicted"


def test_unsettled(verify_citation, site):
    assert verify_citation({UNSETTLED_CLAIM!r}, site + WATER) == "not_found"
"""


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_environment(monkeypatch)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def _verdicts(report_path: Path) -> list[dict[str, Any]]:
    """Every citation of a JSON report, ports removed (the simulators move between runs)."""
    report = json.loads(report_path.read_text())
    rows = []
    for test in report["tests"]:
        for claim in test["claims"]:
            for citation in claim["citations"]:
                row = {k: v for k, v in citation.items() if k != "final_url"}
                row["url"] = re.sub(r":\d+", "", row["url"])
                rows.append({"nodeid": test["nodeid"], "claim": claim["claim"], **row})
    return rows


def _record(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    with running_sims(monkeypatch) as sims:
        result = _run(pytester, "--citations-record-mode=once", *args)
    return result, sims


def _settings_override(update: str) -> str:
    """A conftest fixture deriving the folder's settings with ``model_copy(update=...)``."""
    return (
        "\n\n@pytest.fixture\ndef citations_settings(citations_settings):\n"
        f"    return citations_settings.model_copy(update={update})\n"
    )


# -- record and replay -------------------------------------------------------------------


def test_record_then_replay_offline_gives_identical_verdicts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(pytester, test_basic=BASIC)
    recorded, _ = _record(pytester, monkeypatch, "--citations-report=recorded.json")
    recorded.assert_outcomes(passed=3)
    cassettes = pytester.path / "tests" / "cassettes" / "citations"
    assert sorted(p.parent.name for p in cassettes.rglob("*.yaml")) == ["judge"] * 3 + ["pages"] * 2

    offline(monkeypatch)
    replayed = _run(pytester, "--citations-record-mode=none", "--citations-report=replayed.json")
    replayed.assert_outcomes(passed=3)
    assert _verdicts(pytester.path / "recorded.json") == _verdicts(pytester.path / "replayed.json")
    replayed.stdout.fnmatch_lines(["*requests: replayed=* live=0*"])


def test_ci_defaults_to_none_and_a_missing_cassette_says_how_to_record_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(pytester, test_basic=BASIC)
    offline(monkeypatch)
    monkeypatch.setenv("CI", "true")
    result = _run(pytester, "-k", "test_contradicted")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*CassetteMissingError*no page cassette for this citation*none*",
            f"*claim:*{CONTRADICTED_CLAIM}*",
            f"*source:*{WATER_PATH}*",
            "*record it: pytest --citations-record-mode=once -k test_contradicted*",
        ]
    )
    assert not (pytester.path / "tests" / "cassettes").exists()


def test_record_mode_all_rerecords_and_once_keeps(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(pytester, test_basic=BASIC)
    _record(pytester, monkeypatch)[0].assert_outcomes(passed=3)
    with running_sims(monkeypatch) as sims:
        sims.judge.brain.reply(UNSETTLED_CLAIM, "supported", BOILING, 0.9)
        kept = _run(pytester, "--citations-record-mode=once", "-k", "unsettled")
        kept.assert_outcomes(passed=1)  # replayed: the judge was not asked
        assert not [r for r in sims.judge.brain.requests if r.method == "POST"]
        redone = _run(pytester, "--citations-record-mode=all", "-k", "unsettled")
        redone.assert_outcomes(failed=1)  # re-recorded: the new script answers
        assert [r for r in sims.judge.brain.requests if r.method == "POST"]
    offline(monkeypatch)
    _run(pytester, "--citations-record-mode=none", "-k", "unsettled").assert_outcomes(failed=1)


# -- assertion output and the marker ----------------------------------------------------


def test_a_failing_assertion_shows_one_row_per_citation(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(
        pytester,
        test_assert=f"""
def test_it(verify_citation, site):
    urls = [site + "{WATER_PATH}", site + "/retired"]
    assert verify_citation({CONTRADICTED_CLAIM!r}, urls) == "supported"
""",
    )
    result, _ = _record(pytester, monkeypatch)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*assert claim verdict 'contradicted' == 'supported'",
            f"*claim: '{CONTRADICTED_CLAIM}'",
            "*label*conf*reason*url*evidence",
            f'*contradicted*0.90*{WATER_PATH}*"{BOILING}"',
            "*unreachable*1.00*http_410*/retired*",
        ]
    )


MARKED = f"""
import pytest

WATER = "{WATER_PATH}"


@pytest.mark.citations
def test_contradiction_fails_by_default(verify_citation, site):
    verify_citation({CONTRADICTED_CLAIM!r}, [site + WATER])


@pytest.mark.citations(fail_on=())
def test_fail_on_empty_passes(verify_citation, site):
    verify_citation({CONTRADICTED_CLAIM!r}, [site + WATER])


@pytest.mark.citations(floor=0.5)
def test_floor_met(verify_citation, site):
    verify_citation({SUPPORTED_CLAIM!r}, [site + WATER, site + "/old-report"])


@pytest.mark.citations(floor=0.9)
def test_floor_missed(verify_citation, site):
    verify_citation({SUPPORTED_CLAIM!r}, [site + WATER, site + "/old-report"])


@pytest.mark.citations(floor=0.9, reachable_only=True)
def test_reachable_floor_met(verify_citation, site):
    verify_citation({SUPPORTED_CLAIM!r}, [site + WATER, site + "/old-report"])
"""


def test_marker_gates_on_labels_and_floor(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(pytester, test_marked=MARKED)
    result, _ = _record(pytester, monkeypatch, "-rf")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_contradiction_fails_by_default*",
            "*@pytest.mark.citations failed:",
            "*1 citation(s) labelled contradicted*",
            f"*[[]contradicted[]]*{WATER_PATH}*",
            f"*evidence: '{BOILING}'",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*citation_precision=0.5000 (1/2) is below the floor 0.9*", "*[[]unreachable[]]*"]
    )
    passed = {line.split("::")[1].split()[0] for line in result.outlines if " PASSED" in line}
    assert not passed or passed == {
        "test_fail_on_empty_passes",
        "test_floor_met",
        "test_reachable_floor_met",
    }


def test_marker_arguments_are_validated(pytester: pytest.Pytester) -> None:
    setup_inner(
        pytester,
        test_bad="""
import pytest

@pytest.mark.citations(fail_on=("contradicted", "bogus"))
def test_label(verify_citation):
    pass

@pytest.mark.citations(floor=1.5)
def test_floor(verify_citation):
    pass

@pytest.mark.citations(flor=0.5)
def test_kwarg(verify_citation):
    pass

@pytest.mark.citations(0.5)
def test_positional(verify_citation):
    pass

@pytest.mark.citations(fail_on=5)
def test_not_labels(verify_citation):
    pass
""",
    )
    result = _run(pytester)
    result.assert_outcomes(errors=5)
    result.stdout.fnmatch_lines_random(
        [
            "*fail_on has unknown label(s) 'bogus'; labels are supported, contradicted*",
            "*floor must be in [[]0, 1[]], not 1.5*",
            "*unknown argument(s) flor*",
            "*takes keyword arguments only*",
            "*fail_on must be a label or a tuple of labels, not 5*",
        ]
    )
    marker_help = _run(pytester, "--markers")
    marker_help.stdout.fnmatch_lines(["@pytest.mark.citations(floor=None, fail_on=*"])


# -- session gates and reports ---------------------------------------------------------


def test_session_floor_fails_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(pytester, test_basic=BASIC)
    result, _ = _record(pytester, monkeypatch, "--citations-floor=0.5")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*citation_precision=0.2500 (1/4)",
            "*reachable_precision=0.3333 (1/3)",
            "*FAILED citations floor: citation_precision=0.2500 (1/4) is below"
            " --citations-floor=0.5",
        ]
    )
    offline(monkeypatch)
    passing = _run(pytester, "--citations-record-mode=none", "--citations-floor=0.25")
    assert passing.ret == pytest.ExitCode.OK


def test_report_schema_and_junit_properties(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(pytester, test_basic=BASIC)
    result, _ = _record(pytester, monkeypatch, "--citations-report=out/r.json", "--junitxml=j.xml")
    result.assert_outcomes(passed=3)
    report = json.loads((pytester.path / "out" / "r.json").read_text())
    assert report["schema"] == "pytest-citations-report"
    assert report["schema_version"] == 1
    assert report["record_mode"] == "once"
    assert "openai_api_key" not in report["settings"]
    assert report["settings"]["judge_provider"] == "openai"
    summary = report["summary"]
    assert summary["labels"] == {
        "supported": 1,
        "contradicted": 1,
        "not_found": 1,
        "unreachable": 1,
        "fabricated": 0,
    }
    assert summary["citation_precision"] == {"value": 0.25, "supported": 1, "total": 4}
    assert summary["reachable_precision"] == {"value": 0.3333, "supported": 1, "reachable": 3}
    assert [t["nodeid"] for t in report["tests"]] == [
        "test_basic.py::test_contradicted",
        "test_basic.py::test_supported",
        "test_basic.py::test_unsettled",
    ]
    junit = (pytester.path / "j.xml").read_text()
    assert junit.count('<property name="citations"') == 3
    assert '<property name="citation_precision" value="0.5000 (1/2)"' in junit


def test_baseline_regression_fails_and_prints_the_diff(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(pytester, test_basic=BASIC)
    _record(pytester, monkeypatch, "--citations-report=base.json")[0].assert_outcomes(passed=3)
    same = _record(pytester, monkeypatch, "--citations-baseline=base.json")[0]
    assert same.ret == pytest.ExitCode.OK
    same.stdout.fnmatch_lines(["*citation_precision: 0.2500 -> 0.2500 (+0.0000)*"])

    with running_sims(monkeypatch) as sims:
        sims.judge.brain.reply(SUPPORTED_CLAIM, "contradicted", BOILING, 0.9)
        worse = _run(
            pytester,
            "--citations-record-mode=all",
            "--citations-baseline=base.json",
            "-k",
            "supported",
        )
    assert worse.ret == pytest.ExitCode.TESTS_FAILED
    worse.stdout.fnmatch_lines(
        [
            "*citation_precision: 0.2500 -> 0.0000 (-0.2500)*",
            f"*supported -> contradicted: *{WATER_PATH}*",
            "*FAILED citations baseline: citation_precision dropped from 0.2500 to 0.0000*",
            f"*FAILED citations baseline: citation moved to contradicted: *{WATER_PATH}*",
        ]
    )


def test_xdist_controller_reports_each_citation_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    setup_inner(pytester, test_basic=BASIC, test_more=BASIC.replace("def test_", "def test_more_"))
    result, _ = _record(pytester, monkeypatch, "-n", "2", "--citations-report=r.json")
    result.assert_outcomes(passed=6)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["summary"]["citations"] == 8
    assert len(report["tests"]) == 6
    assert report["summary"]["citation_precision"]["total"] == 8
    result.stdout.fnmatch_lines(["*citation_precision=0.2500 (2/8)"])
    assert result.stdout.str().count("= citations =") == 1

    offline(monkeypatch)
    replay = _run(pytester, "-n", "2", "--citations-record-mode=none", "--citations-floor=0.3")
    assert replay.ret == pytest.ExitCode.TESTS_FAILED
    replay.stdout.fnmatch_lines(["*requests: replayed=* live=0", "*FAILED citations floor*"])


def test_xdist_report_names_the_settings_the_workers_used(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    setup_inner(pytester, test_basic=BASIC)
    pytester.makeconftest(
        pytester.path.joinpath("conftest.py").read_text() + _settings_override('{"top_k": 5}')
    )
    result, _ = _record(pytester, monkeypatch, "-n", "2", "--citations-report=r.json")
    result.assert_outcomes(passed=3)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["settings"]["top_k"] == 5  # the conftest override, not the default 3


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_the_report_names_the_configuration_each_folder_used(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    if workers:
        pytest.importorskip("xdist")
    setup_inner(pytester, test_basic=BASIC)
    wide = pytester.mkdir("wide")
    (wide / "test_wide.py").write_text(BASIC.replace("def test_", "def test_wide_"))
    (wide / "conftest.py").write_text("import pytest" + _settings_override('{"top_k": 5}'))
    result, _ = _record(pytester, monkeypatch, *workers, "--citations-report=r.json")
    result.assert_outcomes(passed=6)
    report = json.loads((pytester.path / "r.json").read_text())
    configurations = report["configurations"]
    assert sorted(c["top_k"] for c in configurations.values()) == [3, 5]
    top_k = {
        test["nodeid"].split("::")[0]: configurations[test["configuration"]]["top_k"]
        for test in report["tests"]
    }
    assert top_k == {"test_basic.py": 3, "wide/test_wide.py": 5}
    assert report["settings"] in configurations.values()


def test_a_crashed_worker_still_names_the_configuration_of_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker that dies sends no end-of-session output: the configurations must
    # reach the controller with the verdicts themselves.
    pytest.importorskip("xdist")
    crash = "\n\ndef test_zz_crash():\n    import os\n    os._exit(1)\n"
    setup_inner(pytester, test_basic=BASIC + crash)
    result, _ = _record(pytester, monkeypatch, "-n", "1", "--citations-report=r.json")
    result.assert_outcomes(passed=3, failed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["tests"] and all(
        test["configuration"] in report["configurations"] for test in report["tests"]
    )
    assert report["settings"]["top_k"] == 3


def test_settings_derived_with_a_string_cache_path_still_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # model_copy does not validate: a str where Settings holds a Path must not
    # break the report, nor the tests.
    setup_inner(pytester, test_basic=BASIC)
    pytester.makeconftest(
        pytester.path.joinpath("conftest.py").read_text()
        + _settings_override('{"embedding_cache_dir": "cache/vectors"}')
    )
    result, _ = _record(pytester, monkeypatch, "--citations-report=r.json")
    result.assert_outcomes(passed=3)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["settings"]["embedding_cache_dir"] == "cache/vectors"


def test_audit_index_gets_one_row_per_citation_from_every_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    from pytest_citations.audit import AuditLog

    monkeypatch.delenv("PYTEST_CITATIONS_RUN_ID", raising=False)
    setup_inner(pytester, test_basic=BASIC, test_more=BASIC.replace("def test_", "def test_more_"))
    result, _ = _record(pytester, monkeypatch, "-n", "2", "--citations-audit=audit.sqlite3")
    result.assert_outcomes(passed=6)
    rows = AuditLog(pytester.path / "audit.sqlite3").rows()
    assert len(rows) == 8  # every citation, each exactly once, from both workers
    assert len({row.run_id for row in rows}) == 1
    assert sorted(row.label for row in rows).count("unreachable") == 2


# -- secrets, coexistence, start-up -----------------------------------------------------


def test_no_secret_reaches_any_written_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simulators.crawlbase import NORMAL_TOKEN, start_crawlbase
    from simulators.scripted import FAKE_KEY

    setup_inner(
        pytester,
        test_crawl=f"""
def test_crawlbase(verify_citation):
    url = "https://example.com{WATER_PATH}"
    assert verify_citation({SUPPORTED_CLAIM!r}, [url]) == "supported"
""",
    )
    crawlbase = start_crawlbase()
    try:
        monkeypatch.setenv("CRAWLBASE_TOKEN", NORMAL_TOKEN)
        monkeypatch.setenv("CRAWLBASE_API_URL", crawlbase.url + "/")
        result, _ = _record(pytester, monkeypatch, "--citations-report=r.json", "--junitxml=j.xml")
    finally:
        crawlbase.stop()
    result.assert_outcomes(passed=1)
    written = files_text(pytester.path)
    assert "storage_url" in written  # the Crawlbase answer was recorded…
    assert NORMAL_TOKEN not in written  # …without the token
    assert FAKE_KEY not in written
    offline(monkeypatch)
    monkeypatch.setenv("CRAWLBASE_API_URL", "http://127.0.0.1:9/")
    # Without a token "auto" would mean direct fetching: name the fetcher to replay.
    _run(pytester, "--citations-record-mode=none", "--citations-fetcher=crawlbase").assert_outcomes(
        passed=1
    )


def test_the_reported_settings_hold_no_credential_from_a_url(tmp_path: Path) -> None:
    from pytest_citations.plugin import _settings_json
    from pytest_citations.settings import Settings

    settings = Settings(
        openai_api_key="sk-the-real-key-000",  # type: ignore[arg-type]
        openai_base_url="https://judge:pa55word@proxy.example/v1?token=tok-abcdef",
        ollama_host="http://localhost:11434/?key=sk-the-real-key-000",
    )
    text = json.dumps(_settings_json(settings, tmp_path))
    for secret in ("pa55word", "tok-abcdef", "sk-the-real-key-000"):
        assert secret not in text
    assert "https://proxy.example/v1?token=" in text  # the endpoint itself is kept


def test_coexists_with_a_users_own_vcrpy_cassette(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup_inner(
        pytester,
        test_mixed=f"""
import httpx
import vcr


def test_both(verify_citation, site):
    with vcr.use_cassette("user-cassettes/mine.yaml", record_mode="once"):
        assert httpx.get(site + "/notes.txt").status_code == 200
        assert verify_citation({SUPPORTED_CLAIM!r}, [site + "{WATER_PATH}"]) == "supported"
""",
    )
    result, _ = _record(pytester, monkeypatch)
    result.assert_outcomes(passed=1)
    user = (pytester.path / "user-cassettes" / "mine.yaml").read_text()
    assert "/notes.txt" in user
    assert WATER_PATH not in user and "chat/completions" not in user
    assert len(list((pytester.path / "tests" / "cassettes").rglob("*.yaml"))) == 2


def test_a_suite_without_citations_prints_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = _run(pytester, "--citations-report=r.json", "--citations-floor=1")
    result.assert_outcomes(passed=1)
    assert "= citations =" not in result.stdout.str()
    assert not (pytester.path / "r.json").exists()
    assert not (pytester.path / "tests").exists()


def test_the_plugin_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_citations.plugin\n"
        "heavy = [m for m in ('httpx', 'pydantic', 'vcr', 'yaml', 'torch', 'numpy',"
        " 'sentence_transformers', 'pytest_citations.models') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert output.strip() == "[]"


def test_collect_only_loads_no_heavy_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    pytester.makeconftest(
        """
import sys

def pytest_collection_finish(session):
    heavy = [m for m in ('httpx', 'pydantic', 'vcr', 'torch') if m in sys.modules]
    print('HEAVY', heavy)
"""
    )
    result = _run(pytester, "--collect-only", "-s")
    result.stdout.fnmatch_lines(["HEAVY []"])
