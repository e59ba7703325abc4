"""The audit index: one SQLite row per verified citation (DESIGN.md §10).

A precision score is only worth what you can check later, and the cited page
may change the day after the check. Crawlbase keeps a stored copy of each page
for 30 days (``store=true``); this index keeps what is needed to find it again
and to know what was decided: the rid, the claim, the URL, the label, the
confidence, the reason, a UTC timestamp and the run it belongs to. A citation
that never produced a stored page (a refused PDF, a dead host) still gets a
row, with an empty rid, so the decision is recorded even with no body to replay.

Many processes may write at once (pytest-xdist workers, a batch beside a test
run): the database runs in WAL mode with a busy timeout, every write is one
short ``BEGIN IMMEDIATE`` transaction, and a write that still meets a lock is
retried, so no writer fails and no row is lost. Each call opens its own
connection, so an :class:`AuditLog` is safe to share between threads and to
hand to a forked worker.

Only the rid is kept, never the ``storage_url``: that URL carries the token.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pytest_citations.models import CitationVerdict, ClaimVerdict, Label

#: File name of the index when no path is given: it sits beside the reports.
DEFAULT_AUDIT_FILE = "citations-audit.sqlite3"

#: Seconds SQLite itself waits for a lock before giving up a statement.
DEFAULT_BUSY_TIMEOUT = 30.0

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        TEXT NOT NULL,
    timestamp     TEXT NOT NULL,
    claim         TEXT NOT NULL,
    url           TEXT NOT NULL,
    label         TEXT NOT NULL,
    confidence    REAL,
    reason        TEXT,
    rid           TEXT,
    final_url     TEXT,
    original_status INTEGER,
    citation_key  TEXT
);
CREATE INDEX IF NOT EXISTS audit_timestamp ON audit (timestamp);
CREATE INDEX IF NOT EXISTS audit_label ON audit (label);
CREATE UNIQUE INDEX IF NOT EXISTS audit_run_key ON audit (run_id, citation_key);
"""

_COLUMNS = (
    "id",
    "run_id",
    "timestamp",
    "claim",
    "url",
    "label",
    "confidence",
    "reason",
    "rid",
    "final_url",
    "original_status",
    "citation_key",
)


class _NotYetWal(sqlite3.OperationalError):
    pass


@dataclass(frozen=True)
class AuditRow:
    """One audited citation as stored."""

    id: int
    run_id: str
    timestamp: str
    claim: str
    url: str
    label: str
    confidence: float | None
    reason: str | None
    rid: str | None
    final_url: str | None
    original_status: int | None
    citation_key: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def new_run_id() -> str:
    """A run id that sorts by start time and never collides: ``20240501T120000Z-1a2b3c4d``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:8]}"


def utc_now() -> str:
    """The timestamp format of every row: ISO 8601, UTC, microseconds, ``+00:00``."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def parse_since(value: str | date | datetime) -> str:
    """Turn ``2024-05-01``, ``2024-05-01T12:00``, ``...Z`` or ``...+02:00`` into a row timestamp.

    A date means its midnight UTC; a time without a zone is taken as UTC.
    Raises ``ValueError`` for anything else.
    """
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    else:
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


class AuditLog:
    """The audit index at ``path`` (created with its folders on first use).

    ``record`` writes one row per citation; ``rows`` reads them back, oldest
    first. ``busy_timeout`` is how long one statement waits for another
    writer; on top of it a write that still finds the database locked is
    retried for ``retry_for`` seconds.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        retry_for: float = 120.0,
    ) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self.retry_for = retry_for
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._retrying(self._initialise)

    # ------------------------------------------------------------------ connection

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        connection = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            yield connection
        finally:
            connection.close()

    def _initialise(self) -> None:
        with self._connect() as connection:
            mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                # Another connection holds the file in a way that blocks the
                # switch; it is transient, like a lock.
                raise _NotYetWal(f"cannot switch {self.path} to WAL yet (still {mode})")
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise

    def _retrying(self, action: Any, *args: Any) -> Any:
        deadline = time.monotonic() + self.retry_for
        delay = 0.01
        while True:
            try:
                return action(*args)
            except sqlite3.OperationalError as error:
                message = str(error).lower()
                transient = (
                    isinstance(error, _NotYetWal) or "locked" in message or "busy" in message
                )
                if not transient or time.monotonic() >= deadline:
                    raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.5)

    @property
    def journal_mode(self) -> str:
        """``wal`` once the index exists (tests and ``citations audit`` check it)."""
        with self._connect() as connection:
            return str(connection.execute("PRAGMA journal_mode").fetchone()[0]).lower()

    # ----------------------------------------------------------------------- write

    def record(
        self,
        run_id: str,
        verdict: ClaimVerdict | CitationVerdict,
        *,
        claim: str | None = None,
        key: str | None = None,
        timestamp: str | None = None,
    ) -> int:
        """Write one row per citation of ``verdict``; returns how many rows were written.

        A :class:`ClaimVerdict` brings its claim and all its citations. A lone
        :class:`CitationVerdict` needs ``claim``. ``key`` makes the row
        idempotent within ``run_id`` (a batch passes ``"<record id>#<url
        index>"``, so a resumed run that redoes a citation replaces its row
        instead of adding a second one); for a ClaimVerdict each citation's key
        is ``"<key>#<index>"``.
        """
        if isinstance(verdict, ClaimVerdict):
            items = [
                (verdict.claim, citation, None if key is None else f"{key}#{index}")
                for index, citation in enumerate(verdict.citations)
            ]
        else:
            if claim is None:
                raise ValueError("recording a CitationVerdict needs the claim it cites for")
            items = [(claim, verdict, key)]
        return self.record_many(run_id, items, timestamp=timestamp)

    def record_many(
        self,
        run_id: str,
        items: Iterable[tuple[str, CitationVerdict, str | None]],
        *,
        timestamp: str | None = None,
    ) -> int:
        """Write ``(claim, citation, key)`` rows in one transaction."""
        stamp = timestamp or utc_now()
        values = [
            (
                run_id,
                stamp,
                claim,
                citation.url,
                Label(citation.label).value,
                citation.confidence,
                citation.reason,
                citation.rid or None,
                citation.final_url,
                citation.original_status,
                key,
            )
            for claim, citation, key in items
        ]
        if not values:
            return 0
        self._retrying(self._insert, values)
        return len(values)

    def _insert(self, values: list[tuple[Any, ...]]) -> None:
        with self._connect() as connection:
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.executemany(
                    "INSERT OR REPLACE INTO audit (run_id, timestamp, claim, url, label, "
                    "confidence, reason, rid, final_url, original_status, citation_key) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    values,
                )
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise

    # ------------------------------------------------------------------------ read

    def rows(
        self,
        since: str | date | datetime | None = None,
        label: Label | str | None = None,
        *,
        run_id: str | None = None,
    ) -> list[AuditRow]:
        """Rows at or after ``since`` (see :func:`parse_since`), with ``label``, oldest first."""
        where: list[str] = []
        params: list[Any] = []
        if since is not None:
            where.append("timestamp >= ?")
            params.append(parse_since(since))
        if label is not None:
            where.append("label = ?")
            params.append(Label(label).value)
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        query = f"SELECT {', '.join(_COLUMNS)} FROM audit"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY timestamp, id"

        def read() -> list[AuditRow]:
            with self._connect() as connection:
                return [AuditRow(*row) for row in connection.execute(query, params)]

        result: list[AuditRow] = self._retrying(read)
        return result

    def __repr__(self) -> str:
        return f"AuditLog({str(self.path)!r})"


def default_audit_path(reports_dir: str | os.PathLike[str] | None = None) -> Path:
    """``citations-audit.sqlite3`` in ``reports_dir`` (default: the current directory)."""
    return Path(reports_dir or ".") / DEFAULT_AUDIT_FILE
