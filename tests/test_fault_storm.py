"""Fault storms: large batches against simulators that misbehave at random (seeded).

Every page and every judge call draws a fault from a seeded plan: 429 with
``Retry-After``, 500/502/503, connection resets, read timeouts, truncated
bodies, 10 MB pages (cut at a small ``max_page_bytes``), binary content, wrong
charsets, redirect loops, malformed judge JSON, judge quotes that are not on the
page; through Crawlbase: 429/5xx, 520 failed crawls and ``cb_status`` 207.

What must hold, whatever the storm:

* every input citation ends with exactly one row: a label (and the label the
  fault implies), or a typed error only where the input itself is invalid;
* retries are bounded: the simulators count requests per page and per judged
  citation;
* a run killed with SIGKILL halfway resumes with ``--resume``: nothing finished
  is redone, nothing is lost or duplicated (report, journal, audit index);
* no secret value appears in any output, cassette, audit row or log line.

Judge replies are scripted fixtures, not model traces. Backoffs are made tiny
in-process (``rules.sleep`` and the judge's ``Backoff``); the subprocess run
uses ``Retry-After: 0`` everywhere instead.

Sizes: 1,000 citations in-process (about 20-40 s on two busy cores), 300 in the
SIGKILL run. ``CITATIONS_STORM_FULL=1`` runs 5,000 and 1,000 instead.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import logging
import os
import random
import re
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeEmbedder, judge_env, kill_midway, write_jsonl
from simulators._server import QuietHandler, Simulator
from simulators.crawlbase import JS_TOKEN, NORMAL_TOKEN, CrawlbaseHandler, CrawlbaseState, Target
from simulators.openai import OpenAIHandler
from simulators.scripted import FAKE_KEY, Fault, JudgeSimulator, ScriptedJudge, Verdict
from simulators.website import tiny_png

from pytest_citations.batch import BatchOptions, Journal, run_batch
from pytest_citations.fetch import rules
from pytest_citations.judge import Backoff, make_judge
from pytest_citations.pipeline import Verifier
from pytest_citations.settings import Settings
from pytest_citations.transport import LiveRecorder

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FULL = os.environ.get("CITATIONS_STORM_FULL") == "1"
SEED = 20250101
RETRIES = 2
TIMEOUT = 1.5
MAX_PAGE_BYTES = 64 * 1024
SECRETS = (FAKE_KEY, NORMAL_TOKEN, JS_TOKEN)

# ------------------------------------------------------------------- the faulty website

#: (page fault, weight). ``clean`` and the recoverable faults are judged.
PAGE_FAULTS: tuple[tuple[str, int], ...] = (
    ("clean", 50),
    ("retry_429", 6),  # 429 Retry-After: 0, then the page
    ("retry_5xx", 6),  # 500/502/503 once, then the page
    ("down", 3),  # 503 on every attempt
    ("rate_limited_long", 2),  # 429 Retry-After: 120 (beyond the cap: no wait, no retry)
    ("reset", 4),  # connection reset before any answer
    ("timeout", 2),  # answers after the read timeout
    ("truncated", 4),  # Content-Length promises more than is sent
    ("huge", 1),  # 10 MB streamed page, cut at max_page_bytes
    ("binary", 3),
    ("charset", 5),  # wrong or bogus charset
    ("loop", 3),  # redirect loop
    ("gone", 3),  # 404
    ("redirected", 4),  # 301 then the page: a legitimate hop
)
#: Page faults after which the page is read and judged.
JUDGED = {"clean", "retry_429", "retry_5xx", "huge", "charset", "redirected"}
PAGE_EXPECTED: dict[str, tuple[str, str | None]] = {
    "down": ("unreachable", "http_503"),
    "rate_limited_long": ("unreachable", "http_429"),
    "reset": ("unreachable", "connect_error"),
    "timeout": ("unreachable", "timeout"),
    "truncated": ("unreachable", "connect_error"),
    "binary": ("not_found", "binary_content"),
    "loop": ("unreachable", "too_many_redirects"),
    "gone": ("unreachable", "http_404"),
}

#: (judge fault plan, weight, expected (label, reason)).
JUDGE_FAULTS: tuple[tuple[str, int, tuple[str, str | None]], ...] = (
    ("none", 60, ("supported", None)),
    ("429_then_ok", 6, ("supported", None)),
    ("5xx_then_ok", 6, ("supported", None)),
    ("disconnect_then_ok", 3, ("supported", None)),
    ("malformed_once", 6, ("supported", None)),
    ("malformed_twice", 4, ("not_found", "judge_error")),
    ("always_503", 2, ("not_found", "judge_error")),
    ("foreign_quote", 6, ("not_found", "evidence_quote_not_in_source")),
    ("refusal", 2, ("not_found", "judge_error")),
)

_MARKER = re.compile(r"page marker (P[\w-]+)")


def fact(i: int) -> str:
    return f"Widget model {i} weighs exactly {i * 7 + 3} grams and ships in a blue box."


def page_html(i: int, marker: str, *, charset_text: str = "") -> str:
    filler = (
        "The survey team recorded measurements across several coastal stations and "
        "compared every reading with archived values from earlier expeditions, so that "
        "drift in the instruments could be corrected before publication. "
    )
    return (
        "<!doctype html><html><head><title>Widget catalogue</title></head><body>"
        "<nav><a href='/'>Home</a></nav><main><article><h1>Widget catalogue</h1>"
        f"<p>{fact(i)} This is page marker {marker}.</p>"
        f"<p>{filler * 2}{charset_text}</p><p>{filler}</p>"
        "</article></main><footer>Copyright 2025</footer></body></html>"
    )


def judge_faults(plan: str) -> list[Fault]:
    """The faults served, in order, to the judge requests of one citation."""
    return {
        "none": [],
        "429_then_ok": [Fault.status(429, retry_after="0")],
        "5xx_then_ok": [Fault.status(502 if random.random() < 0.5 else 500)],
        "disconnect_then_ok": [Fault.disconnect()],
        "malformed_once": [Fault.malformed()],
        "malformed_twice": [Fault.malformed(), Fault.malformed('{"label": "maybe"}')],
        "always_503": [Fault.status(503, retry_after="0")] * (RETRIES + 1),
        "foreign_quote": [Fault.foreign_quote("Widgets are made of pure gold.")],
        "refusal": [Fault.refusal()],
    }[plan]


@dataclass
class Item:
    """One web citation of the storm and what it must end as."""

    record: str
    index: int
    path: str
    marker: str
    page_fault: str
    judge_plan: str

    @property
    def expected(self) -> tuple[str, str | None]:
        if self.page_fault not in JUDGED:
            return PAGE_EXPECTED[self.page_fault]
        return next(e for plan, _, e in JUDGE_FAULTS if plan == self.judge_plan)


@dataclass
class StormState:
    """Per path: the page fault; per marker: the judge faults. Counts every request."""

    pages: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # path -> fault, i, marker
    hits: Counter[str] = field(default_factory=Counter)
    delay: float = 0.0
    retry_after_5xx: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class StormSite(QuietHandler):
    """The faulty origin: ``/p/<record>/<index>`` plus the hops of loops and redirects."""

    def do_GET(self) -> None:
        state: StormState = self.server.state  # type: ignore[attr-defined]
        with state.lock:
            state.hits[self.path] += 1
            count = state.hits[self.path]
        if state.delay:
            time.sleep(state.delay)
        base, _, hop = self.path.partition("?")
        entry = state.pages.get(base)
        if entry is None:
            self.send(404, "no such page", content_type="text/plain")
            return
        kind, i, marker = entry
        html = page_html(i, marker)
        if kind == "retry_429" and count == 1:
            self.send(429, "slow down", headers={"Retry-After": "0"})
        elif kind == "retry_5xx" and count == 1:
            headers = {"Retry-After": state.retry_after_5xx} if state.retry_after_5xx else None
            self.send((500, 502, 503)[i % 3], "oops", headers=headers)
        elif kind == "down":
            self.send(503, "down", headers={"Retry-After": "0"})
        elif kind == "rate_limited_long":
            self.send(429, "come back later", headers={"Retry-After": "120"})
        elif kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
        elif kind == "timeout":
            time.sleep(TIMEOUT + 1.0)
            self.send(200, html, content_type="text/html; charset=utf-8")
        elif kind == "truncated":
            data = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data) + 5000))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.close_connection = True
        elif kind == "huge":
            self._huge(html)
        elif kind == "binary":
            self.send(200, tiny_png() * 50, content_type="image/png")
        elif kind == "charset":
            if i % 2:  # declared UTF-8, sent as windows-1252
                body = page_html(i, marker, charset_text=" Café “menu” – déjà vu.").encode("cp1252")
                self.send(200, body, content_type="text/html; charset=utf-8")
            else:  # a charset no codec knows
                self.send(200, html.encode(), content_type="text/html; charset=x-no-such-charset")
        elif kind == "gone":
            self.send(404, "<h1>Not Found</h1>", content_type="text/html; charset=utf-8")
        elif kind == "loop":
            target = base + "?hop=b" if not hop else base
            self.send(302, "", headers={"Location": target})
        elif kind == "redirected" and not hop:
            self.send(301, "", headers={"Location": base + "?hop=final"})
        else:
            self.send(200, html, content_type="text/html; charset=utf-8")

    def _huge(self, html: str) -> None:
        head = html.replace("</article>", "")
        chunk = b"<p>" + b"Filler paragraph of a very large page that repeats. " * 20 + b"</p>\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(10 * 1024 * 1024))
        self.end_headers()
        self.close_connection = True
        try:
            self.wfile.write(head.encode())
            sent = 0
            while sent < 10 * 1024 * 1024:
                self.wfile.write(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return


class StormJudge(OpenAIHandler):
    """The OpenAI simulator, with faults chosen per judged page (by its marker), not FIFO.

    Concurrent citations would otherwise consume one shared fault queue in an
    arbitrary order; keyed by marker, each citation gets its own plan.
    """

    def do_POST(self) -> None:
        brain: StormBrain = self.server.state  # type: ignore[attr-defined]
        recorded = brain.record(self, self.read_body())
        text = json.dumps(recorded.json) if recorded.json is not None else ""
        found = _MARKER.search(text)
        marker = found.group(1) if found else "?"
        with brain.counts_lock:
            brain.counts[marker] += 1
            attempt = brain.counts[marker]
        plan = brain.plans.get(marker, [])
        fault = plan[attempt - 1] if attempt <= len(plan) else None
        if fault is not None and fault.kind == "disconnect":
            self.close_connection = True
            return
        self.answer(recorded, fault)


@dataclass
class StormBrain(ScriptedJudge):
    plans: dict[str, list[Fault]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    counts_lock: threading.Lock = field(default_factory=threading.Lock)


def _script(claim: str, passages: list[str]) -> Verdict:
    """Supported with the claim as the quote when a passage holds it (a fixture rule)."""
    if any(claim in passage for passage in passages):
        return Verdict("supported", claim, 0.95)
    return Verdict("not_found", None, 0.3)


def build_storm(
    citations: int, seed: int, *, site_url: str, invalid_every: int = 0
) -> tuple[list[dict[str, Any]], list[Item], StormState, dict[str, list[Fault]]]:
    """Records (2 URLs each), the web items, the site's plan and the judge's plans."""
    rng = random.Random(seed)
    random.seed(seed)  # judge_faults draws 500 vs 502 from the module RNG
    kinds, weights = zip(*PAGE_FAULTS, strict=True)
    plans_j, weights_j = [p for p, _, _ in JUDGE_FAULTS], [w for _, w, _ in JUDGE_FAULTS]
    state = StormState()
    judge_plans: dict[str, list[Fault]] = {}
    records: list[dict[str, Any]] = []
    items: list[Item] = []
    for r in range(citations // 2):
        urls = []
        for j in range(2):
            path = f"/p/{r}/{j}"
            marker = f"P{r}-{j}"
            kind = rng.choices(kinds, weights)[0]
            plan = rng.choices(plans_j, weights_j)[0]
            state.pages[path] = (kind, r, marker)
            judge_plans[marker] = judge_faults(plan)
            urls.append(site_url + path)
            items.append(Item(f"r{r}", j, path, marker, kind, plan))
        records.append({"id": f"r{r}", "claim": fact(r), "urls": urls})
    if invalid_every:
        for r in range(0, len(records), invalid_every):
            records[r]["urls"][1] = str(ROOT / "no-such-dir" / f"missing-{r}.txt")
            items = [it for it in items if not (it.record == f"r{r}" and it.index == 1)]
        records[1]["urls"][1] = "ftp://example.com/file.txt"
        items = [it for it in items if not (it.record == "r1" and it.index == 1)]
    return records, items, state, judge_plans


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _assert_no_secret(paths: list[Path], texts: list[str]) -> None:
    for path in paths:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f"a secret leaked into {path}"
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, "a secret leaked into a log or stream"


@pytest.fixture
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetch retries wait ~0 s."""

    async def no_wait(seconds: float) -> None:
        await asyncio.sleep(0)

    monkeypatch.setattr(rules, "sleep", no_wait)


# ------------------------------------------------------------------------ in-process storm


def test_web_storm_every_citation_labelled_once_retries_bounded_no_secrets(
    tmp_path: Path, fast_backoff: None, caplog: pytest.LogCaptureFixture
) -> None:
    # INFO: httpx's request lines and our retry messages (httpcore's DEBUG wire
    # trace is checked in the Crawlbase storm, where a token could reach it).
    caplog.set_level(logging.INFO)
    total = 5000 if FULL else 1000
    brain = StormBrain(script=_script)
    with Simulator(StormSite, StormState()) as site, JudgeSimulator(StormJudge, brain) as judge:
        records, items, state, plans = build_storm(
            total, SEED, site_url=site.url, invalid_every=100
        )
        site._server.state = state
        brain.plans = plans
        malformed = [
            "this line is not JSON",
            json.dumps({"id": "no-urls", "claim": "A claim."}),
            json.dumps({"id": "r0", "claim": "A duplicate id.", "urls": ["http://x.test/"]}),
        ]
        source = write_jsonl(tmp_path / "storm.jsonl", [*records[:3], *malformed, *records[3:]])
        settings = Settings(
            openai_api_key=FAKE_KEY,
            openai_base_url=judge.url + "/v1",
            fetcher="direct",
            allow_private_hosts=True,
            retries=RETRIES,
            timeout=TIMEOUT,
            max_page_bytes=MAX_PAGE_BYTES,
        )
        tiny = Backoff(base=0.001, cap=0.005, retry_after_cap=0.01, jitter=False)
        verifier = Verifier(
            settings,
            embedder=FakeEmbedder(),
            judge=make_judge(settings, backoff=tiny),
            recorder=LiveRecorder(allow_private_hosts=True),
        )
        out = tmp_path / "storm.csv"
        options = BatchOptions(
            input=source,
            out=out,
            json_out=tmp_path / "storm.json",
            concurrency=32,
            audit=tmp_path / "audit.sqlite3",
            keep_journal=True,
        )
        stderr = io.StringIO()
        started = time.monotonic()
        result = asyncio.run(
            run_batch(options, verifier, stderr=stderr, secrets=settings.secret_values())
        )
        elapsed = time.monotonic() - started

    # Every input citation exactly once, in input order.
    expected_keys = [(r["id"], i) for r in records for i in range(len(r["urls"]))]
    rows = _csv_rows(out)
    assert [(row["id"], int(row["url_index"])) for row in rows] == expected_keys
    assert len(result.rows) == len(expected_keys) == total
    assert [p.line for p in result.problems] == [4, 5, 6]

    # Typed errors only where the input is invalid (a local file that does not exist).
    errors = {(row["id"], int(row["url_index"])): row["error"] for row in rows if row["error"]}
    missing_local = {(r["id"], 1) for r in records if "missing-" in r["urls"][1]}
    assert set(errors) == missing_local
    assert all(error.startswith("SourceError:") for error in errors.values())
    assert all(row["label"] for row in rows if not row["error"])
    ftp = next(row for row in rows if row["url"].startswith("ftp://"))
    assert (ftp["label"], ftp["reason"]) == ("unreachable", "invalid_url")

    # The label each fault implies.
    by_key = {(row["id"], int(row["url_index"])): row for row in rows}
    wrong = []
    for item in items:
        row = by_key[(item.record, item.index)]
        got = (row["label"], row["reason"] or None)
        if got != item.expected:
            wrong.append((item.page_fault, item.judge_plan, got, row["detail"][:120]))
    assert not wrong, f"{len(wrong)} citation(s) mislabelled, e.g. {wrong[:5]}"

    # Bounded retries, counted at the simulators.
    for path, hits in state.hits.items():
        assert hits <= RETRIES + 1, f"{path} was requested {hits} times"
    for marker, count in brain.counts.items():
        assert count <= RETRIES + 2, f"the judge was asked {count} times for {marker}"
    judged = {it.marker for it in items if it.page_fault in JUDGED}
    assert judged <= set(brain.counts)

    # Audit: one row per verified citation, no duplicates.
    with sqlite3.connect(tmp_path / "audit.sqlite3") as db:
        (audit_rows,) = db.execute("select count(*) from audit").fetchone()
        (distinct,) = db.execute("select count(distinct citation_key) from audit").fetchone()
    assert audit_rows == distinct == total - len(errors)

    outputs = [p for p in tmp_path.iterdir() if p.is_file() and p.suffix != ".jsonl"]
    outputs.append(Journal.path_for(out))
    _assert_no_secret(outputs, [stderr.getvalue(), caplog.text])
    print(f"storm: {total} citations in {elapsed:.1f}s; labels {Counter(r['label'] for r in rows)}")


# ------------------------------------------------------------------------ SIGKILL + resume


def test_storm_batch_killed_with_sigkill_resumes_without_loss_or_repeat(tmp_path: Path) -> None:
    total = 1000 if FULL else 300
    brain = StormBrain(script=_script)
    with Simulator(StormSite, StormState()) as site, JudgeSimulator(StormJudge, brain) as judge:
        records, items, state, plans = build_storm(total, SEED + 1, site_url=site.url)
        # The subprocess waits real backoffs: make every retry answer say Retry-After: 0
        # and drop the plans whose only retry waits on the judge's computed backoff.
        state.retry_after_5xx = "0"
        state.delay = 0.02  # so the kill lands mid-run
        for marker, plan in plans.items():
            plans[marker] = [
                Fault.status(f.code, retry_after="0") if f.kind == "status" else f
                for f in plan
                if f.kind != "disconnect"
            ]
        site._server.state = state
        brain.plans = plans
        source = write_jsonl(tmp_path / "in.jsonl", records)
        out = tmp_path / "report.csv"
        audit = tmp_path / "audit.sqlite3"
        journal = Journal.path_for(out)
        env = {
            **os.environ,
            **judge_env(judge.url, FAKE_KEY),
            "CITATIONS_RETRIES": str(RETRIES),
            "CITATIONS_TIMEOUT": str(TIMEOUT),
            "CITATIONS_MAX_PAGE_BYTES": str(MAX_PAGE_BYTES),
            "PYTHONPATH": str(ROOT),
        }
        env.pop("CI", None)
        driver = "import sys\nfrom fakes import main\nsys.exit(main())\n"
        env["PYTHONPATH"] = os.pathsep.join((str(TESTS), str(ROOT)))
        argv = [
            sys.executable,
            "-c",
            driver,
            "batch",
            str(source),
            "--out",
            str(out),
            "--json",
            str(tmp_path / "report.json"),
            "--concurrency",
            "4",
            "--audit-db",
            str(audit),
            "--keep-journal",
        ]
        child = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
        )
        first_out, first_err = kill_midway(child, journal, entries=total // 2, timeout=120)
        before = Journal.read(journal)
        done = {(e["record"], e["index"]) for e in before.entries if "verdict" in e}
        assert total // 2 <= len(done) < total
        done_markers = {f"P{rec[1:]}-{index}" for rec, index in done}
        judge_before = dict(brain.counts)
        hits_before = dict(state.hits)

        resumed = subprocess.run(
            [*argv, "--resume"], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]

    # Nothing finished before the kill was asked for again.
    for marker in done_markers:
        assert brain.counts.get(marker, 0) == judge_before.get(marker, 0), marker
        path = "/p/{}/{}".format(*marker[1:].split("-"))
        assert state.hits.get(path, 0) == hits_before.get(path, 0), path
    # Every citation exactly once: report, journal and audit index.
    expected_keys = [(r["id"], i) for r in records for i in range(len(r["urls"]))]
    rows = _csv_rows(out)
    assert [(row["id"], int(row["url_index"])) for row in rows] == expected_keys
    assert all(row["label"] and not row["error"] for row in rows)
    after = Journal.read(journal)
    keys = [(e["record"], e["index"]) for e in after.entries]
    assert len(keys) == len(set(keys)) == total
    summary = json.loads((tmp_path / "report.json").read_text())["summary"]
    assert summary["citations"] == total and summary["errors"] == 0
    with sqlite3.connect(audit) as db:
        runs = db.execute("select count(distinct run_id) from audit").fetchone()[0]
        distinct = db.execute("select count(distinct citation_key) from audit").fetchone()[0]
        count = db.execute("select count(*) from audit").fetchone()[0]
    assert runs == 1 and distinct == total and count == total
    by_key = {(row["id"], int(row["url_index"])): row for row in rows}
    wrong = [
        (it.page_fault, it.judge_plan, by_key[(it.record, it.index)]["label"])
        for it in items
        if (by_key[(it.record, it.index)]["label"], by_key[(it.record, it.index)]["reason"] or None)
        != it.expected
    ]
    assert not wrong, wrong[:5]
    _assert_no_secret(
        [p for p in tmp_path.iterdir() if p.is_file() and p.suffix != ".jsonl"],
        [first_out.decode(), first_err.decode(), resumed.stdout, resumed.stderr],
    )


# ------------------------------------------------------------------------ Crawlbase storm

#: (kind, weight, expected (label, reason)) for pages fetched through the Crawling API.
CRAWL_KINDS: tuple[tuple[str, int, tuple[str, str | None]], ...] = (
    ("ok", 40, ("supported", None)),
    ("api_429", 8, ("supported", None)),
    ("api_5xx", 8, ("supported", None)),
    ("api_down", 4, ("unreachable", "crawl_failed")),
    ("failed_crawl_js_ok", 8, ("supported", None)),
    ("failed_crawl_always", 4, ("unreachable", "crawl_failed")),
    ("empty_200_js_ok", 8, ("supported", None)),
    ("empty_200_always", 4, ("not_found", "empty_page")),
    ("thin_then_full", 6, ("supported", None)),
    ("origin_404", 5, ("unreachable", "http_404")),
    ("homepage", 5, ("not_found", "redirected_to_homepage")),
)


def _crawl_target(kind: str, i: int) -> Target:
    text = (
        f"# Widget catalogue\n\n{fact(i)} This is page marker C{i}.\n\n"
        + (
            "The survey team recorded measurements across several coastal stations and "
            "compared every reading with archived values from earlier expeditions. "
        )
        * 3
    )
    if kind == "api_429":
        return Target(markdown=text, api_errors=[429], retry_after="0")
    if kind == "api_5xx":
        return Target(markdown=text, api_errors=[503, 502], retry_after="0")
    if kind == "api_down":
        return Target(markdown=text, api_errors=[503] * (RETRIES + 1), retry_after="0")
    if kind == "failed_crawl_js_ok":
        return Target(api_status=520, js=Target(markdown=text))
    if kind == "failed_crawl_always":
        return Target(api_status=520, js=Target(api_status=520))
    if kind == "empty_200_js_ok":
        return Target(cb_status=207, js=Target(markdown=text))
    if kind == "empty_200_always":
        return Target(cb_status=207)
    if kind == "thin_then_full":
        return Target(markdown="# Widgets\n", markdown_full=text)
    if kind == "origin_404":
        return Target(original_status=404, markdown="# Not Found\n")
    if kind == "homepage":
        return Target(markdown=text, final_url="https://widgets.example/")
    return Target(markdown=text)


def test_crawlbase_storm_records_cassettes_without_secrets_and_replays_the_same_labels(
    tmp_path: Path, fast_backoff: None, caplog: pytest.LogCaptureFixture
) -> None:
    from pytest_citations.cassettes import CassetteRecorder, known_secrets

    caplog.set_level(logging.DEBUG)
    rng = random.Random(SEED + 2)
    total = 200
    kinds, weights = [k for k, _, _ in CRAWL_KINDS], [w for _, w, _ in CRAWL_KINDS]
    expected = {k: e for k, _, e in CRAWL_KINDS}
    targets: dict[str, Target] = {}
    plan: list[tuple[str, str]] = []
    for i in range(total):
        url = f"https://widgets.example/items/{i}"
        kind = rng.choices(kinds, weights)[0]
        targets[url] = _crawl_target(kind, i)
        plan.append((url, kind))
    records = [{"id": f"c{i}", "claim": fact(i), "urls": [url]} for i, (url, _) in enumerate(plan)]
    source = write_jsonl(tmp_path / "crawl.jsonl", records)
    brain = StormBrain(script=_script)
    # A few judge faults that end well, so judge cassettes hold retried calls too.
    brain.plans = {f"C{i}": [Fault.status(429, retry_after="0")] for i in range(0, total, 7)}
    state = CrawlbaseState(targets=targets)
    with Simulator(CrawlbaseHandler, state) as api, JudgeSimulator(StormJudge, brain) as judge:
        # No JS token: rendering goes through javascript=true (see the xfail test below
        # for a recording made with CRAWLBASE_JS_TOKEN).
        settings = Settings(
            crawlbase_token=NORMAL_TOKEN,
            crawlbase_api_url=api.url + "/",
            openai_api_key=FAKE_KEY,
            openai_base_url=judge.url + "/v1",
            fetcher="crawlbase",
            retries=RETRIES,
            timeout=5.0,
            max_page_bytes=MAX_PAGE_BYTES,
        )
        cassettes = tmp_path / "cassettes"
        tiny = Backoff(base=0.001, cap=0.005, retry_after_cap=0.01, jitter=False)

        def verifier(mode: str, live: Settings) -> Verifier:
            return Verifier(
                live,
                embedder=FakeEmbedder(),
                judge=make_judge(live, backoff=tiny),
                recorder=CassetteRecorder(cassettes, record_mode=mode, secrets=known_secrets(live)),
            )

        stderr = io.StringIO()
        live = asyncio.run(
            run_batch(
                BatchOptions(
                    input=source,
                    out=tmp_path / "live.csv",
                    concurrency=16,
                    audit=tmp_path / "audit.sqlite3",
                ),
                verifier("once", settings),
                stderr=stderr,
                secrets=settings.secret_values(),
            )
        )
    labels = [(row.verdict.label.value, row.verdict.reason) for row in live.rows if row.verdict]
    assert len(labels) == total and not live.errors
    wrong = [
        (kind, got) for (url, kind), got in zip(plan, labels, strict=True) if got != expected[kind]
    ]
    assert not wrong, f"{len(wrong)} mislabelled, e.g. {wrong[:5]}"
    for url, _ in plan:
        calls = sum(state.calls_for(url).values())
        assert calls <= 4 * (RETRIES + 1), f"{url}: {calls} API calls"
    # The rendered (JavaScript) request went out only where a signal asked for it.
    for url, kind in plan:
        js = sum(n for mode, n in state.calls_for(url).items() if mode.startswith("js"))
        assert (js > 0) == (
            kind
            in {"failed_crawl_js_ok", "failed_crawl_always", "empty_200_js_ok", "empty_200_always"}
        ), (kind, js)

    written = [p for p in cassettes.rglob("*") if p.is_file()]
    assert written
    _assert_no_secret(
        [*written, tmp_path / "live.csv", tmp_path / "audit.sqlite3"],
        [stderr.getvalue(), caplog.text],
    )

    # Replay offline, with no token or key: the same labels, request for request.
    offline = Settings(fetcher="crawlbase", retries=RETRIES, max_page_bytes=MAX_PAGE_BYTES)
    replay = asyncio.run(
        run_batch(
            BatchOptions(input=source, out=tmp_path / "replay.csv", concurrency=16),
            verifier("none", offline),
            stderr=io.StringIO(),
        )
    )
    replayed = [(row.verdict.label.value, row.verdict.reason) for row in replay.rows if row.verdict]
    assert replayed == labels


def test_a_judged_page_cut_at_max_page_bytes_says_so_in_its_verdict(
    fast_backoff: None,
) -> None:
    state = StormState(pages={"/p/0/0": ("huge", 0, "P0-0")})
    brain = StormBrain(script=_script)
    with Simulator(StormSite, state) as site, JudgeSimulator(StormJudge, brain) as judge:
        settings = Settings(
            openai_api_key=FAKE_KEY,
            openai_base_url=judge.url + "/v1",
            fetcher="direct",
            allow_private_hosts=True,
            max_page_bytes=MAX_PAGE_BYTES,
        )
        verdict = Verifier(settings, embedder=FakeEmbedder()).verify(fact(0), site.url + "/p/0/0")
    (citation,) = verdict.citations
    assert citation.label == "supported"
    assert citation.detail is not None and "cut" in citation.detail


def test_vcr_log_lines_never_show_the_crawlbase_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pytest_citations.cassettes import CassetteRecorder, known_secrets

    caplog.set_level(logging.DEBUG)
    url = "https://widgets.example/items/0"
    state = CrawlbaseState(targets={url: _crawl_target("ok", 0)})
    with Simulator(CrawlbaseHandler, state) as api:
        settings = Settings(
            crawlbase_token=NORMAL_TOKEN, crawlbase_api_url=api.url + "/", fetcher="crawlbase"
        )
        recorder = CassetteRecorder(tmp_path, record_mode="once", secrets=known_secrets(settings))
        from pytest_citations.fetch import fetch_page

        page = asyncio.run(fetch_page(url, settings, recorder))
    assert page.label is None
    vcr_lines = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("vcr"))
    assert NORMAL_TOKEN not in vcr_lines


def test_a_recording_made_with_the_js_token_replays_without_it(
    tmp_path: Path, fast_backoff: None
) -> None:
    from pytest_citations.cassettes import CassetteRecorder, known_secrets
    from pytest_citations.fetch import fetch_page

    url = "https://widgets.example/items/0"
    state = CrawlbaseState(targets={url: _crawl_target("failed_crawl_js_ok", 0)})
    with Simulator(CrawlbaseHandler, state) as api:
        live = Settings(
            crawlbase_token=NORMAL_TOKEN,
            crawlbase_js_token=JS_TOKEN,
            crawlbase_api_url=api.url + "/",
            fetcher="crawlbase",
        )
        recorder = CassetteRecorder(tmp_path, record_mode="once", secrets=known_secrets(live))
        recorded = asyncio.run(fetch_page(url, live, recorder))
    assert recorded.label is None
    offline = Settings(fetcher="crawlbase")
    replayed = asyncio.run(fetch_page(url, offline, CassetteRecorder(tmp_path, record_mode="none")))
    assert replayed.text == recorded.text


def test_a_judge_error_verdict_replays_from_its_cassette(tmp_path: Path) -> None:
    from pytest_citations.cassettes import CassetteRecorder

    state = StormState(pages={"/p/0/0": ("clean", 0, "P0-0")})
    brain = StormBrain(script=_script)
    brain.plans = {"P0-0": judge_faults("malformed_twice")}
    with Simulator(StormSite, state) as site, JudgeSimulator(StormJudge, brain) as judge:
        live = Settings(
            openai_api_key=FAKE_KEY,
            openai_base_url=judge.url + "/v1",
            fetcher="direct",
            allow_private_hosts=True,
        )
        recorder = CassetteRecorder(tmp_path, record_mode="once", allow_private_hosts=True)
        url = site.url + "/p/0/0"
        first = Verifier(live, embedder=FakeEmbedder(), recorder=recorder).verify(fact(0), url)
    assert first.citations[0].reason == "judge_error"
    replayer = CassetteRecorder(tmp_path, record_mode="none")
    again = Verifier(Settings(fetcher="direct"), embedder=FakeEmbedder(), recorder=replayer)
    assert again.verify(fact(0), url).citations[0].reason == "judge_error"
