"""The SQLite audit index: rows, filters, WAL, and many writers at once."""

from __future__ import annotations

import multiprocessing
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pytest_citations.audit import AuditLog, new_run_id, parse_since
from pytest_citations.models import CitationVerdict, ClaimVerdict, Label


def _claim() -> ClaimVerdict:
    return ClaimVerdict(
        claim="Water boils at 100 degrees Celsius at sea level.",
        label=Label.supported,
        citations=[
            CitationVerdict(
                url="https://example.com/articles/water-boiling-point",
                label=Label.supported,
                evidence_quote="Water boils at 100 degrees Celsius at sea level.",
                confidence=0.96,
                final_url="https://example.com/articles/water-boiling-point",
                original_status=200,
                rid="rid-boil",
            ),
            CitationVerdict(
                url="https://example.com/old-report",
                label=Label.unreachable,
                confidence=1.0,
                original_status=404,
                reason="http_404",
            ),
            CitationVerdict(
                url="https://example.com/paper.pdf",
                label=Label.not_found,
                confidence=1.0,
                reason="pdf_unsupported",
                rid="",
            ),
        ],
    )


def test_rows_record_every_citation_even_without_rid(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "sub" / "audit.sqlite3")
    run = new_run_id()
    assert log.record(run, _claim()) == 3
    rows = log.rows()
    assert [row.label for row in rows] == ["supported", "unreachable", "not_found"]
    first = rows[0]
    assert first.run_id == run
    assert first.claim == "Water boils at 100 degrees Celsius at sea level."
    assert first.rid == "rid-boil"
    assert first.confidence == pytest.approx(0.96)
    assert rows[1].rid is None and rows[1].reason == "http_404"
    assert rows[2].rid is None and rows[2].reason == "pdf_unsupported"  # empty rid kept as NULL
    stamp = datetime.fromisoformat(first.timestamp)
    assert stamp.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - stamp) < timedelta(minutes=1)


def test_filters_by_label_since_and_run(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.sqlite3")
    old = "2024-01-01T00:00:00.000000+00:00"
    log.record("run-old", _claim(), timestamp=old)
    log.record("run-new", _claim())
    assert len(log.rows()) == 6
    assert len(log.rows(label="unreachable")) == 2
    assert len(log.rows(label=Label.supported, run_id="run-new")) == 1
    recent = log.rows(since="2024-06-01")
    assert {row.run_id for row in recent} == {"run-new"}
    assert len(log.rows(since="2023-12-31T23:00:00-02:00")) == 3 + 0  # = 01:00Z: after old
    assert len(log.rows(since=datetime(2023, 1, 1))) == 6


def test_a_lone_citation_needs_its_claim_and_keys_are_idempotent(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.sqlite3")
    citation = _claim().citations[0]
    with pytest.raises(ValueError, match="claim"):
        log.record("run", citation)
    log.record("run", citation, claim="c", key="r1#0")
    log.record("run", citation, claim="c", key="r1#0")  # a resumed run redoes it
    log.record("other-run", citation, claim="c", key="r1#0")
    log.record("run", citation, claim="c")  # no key: always a new row
    log.record("run", citation, claim="c")
    assert len(log.rows(run_id="run")) == 3
    assert len(log.rows()) == 4


def test_wal_mode_is_on(tmp_path: Path) -> None:
    path = tmp_path / "audit.sqlite3"
    log = AuditLog(path)
    assert log.journal_mode == "wal"
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_parse_since_forms() -> None:
    assert parse_since("2024-05-01") == "2024-05-01T00:00:00.000000+00:00"
    assert parse_since("2024-05-01T12:30:00Z") == "2024-05-01T12:30:00.000000+00:00"
    assert parse_since("2024-05-01T14:30:00+02:00") == "2024-05-01T12:30:00.000000+00:00"
    with pytest.raises(ValueError):
        parse_since("last tuesday")


WRITERS = 6
ROWS_PER_WRITER = 40


def _writer(path: str, worker: int, start: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    log = AuditLog(path)
    for index in range(ROWS_PER_WRITER):
        citation = CitationVerdict(
            url=f"https://example.com/{worker}/{index}",
            label=Label.not_found,
            confidence=0.5,
        )
        # half keyed (a batch), half not (the plugin)
        key = f"w{worker}#{index}" if index % 2 else None
        log.record(f"run-{worker}", citation, claim=f"claim {worker} {index}", key=key)


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_concurrent_writers_never_fail_or_lose_a_row(tmp_path: Path, method: str) -> None:
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    path = tmp_path / "audit.sqlite3"
    AuditLog(path)  # the parent creates it, as a test session would
    context: Any = multiprocessing.get_context(method)
    start = context.Event()
    workers = [
        context.Process(target=_writer, args=(str(path), worker, start))
        for worker in range(WRITERS)
    ]
    for process in workers:
        process.start()
    start.set()
    for process in workers:
        process.join(timeout=120)
    assert [process.exitcode for process in workers] == [0] * WRITERS
    rows = AuditLog(path).rows()
    assert len(rows) == WRITERS * ROWS_PER_WRITER
    assert len({row.url for row in rows}) == WRITERS * ROWS_PER_WRITER
    assert AuditLog(path).journal_mode == "wal"


def test_concurrent_first_creation(tmp_path: Path) -> None:
    """Several processes creating the same new index at once all succeed."""
    path = tmp_path / "fresh.sqlite3"
    context: Any = multiprocessing.get_context("spawn")
    start = context.Event()
    workers = [
        context.Process(target=_writer, args=(str(path), worker, start)) for worker in range(4)
    ]
    for process in workers:
        process.start()
    start.set()
    for process in workers:
        process.join(timeout=120)
    assert [process.exitcode for process in workers] == [0] * 4
    assert len(AuditLog(path).rows()) == 4 * ROWS_PER_WRITER
