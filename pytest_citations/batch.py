"""Batch evaluation: citation precision over a JSONL file of LLM answers (DESIGN.md §4, §12).

Each input line is a record ``{"id", "claim", "urls", "quote"?, "section"?}``;
each claim-URL pair is one citation and one report row. The run prints the
seed's two lines on stdout (``citation_precision=0.2222 (2/9)`` and
``reachable_precision=0.3333 (2/6)``) and writes a CSV (and optionally JSON)
report.

Nothing is lost:

* a malformed line (bad JSON, missing field, duplicate id) is reported with its
  line number and skipped; the rest of the run goes on and the exit code says
  some lines failed;
* every finished citation is appended to a journal (``<report>.journal.jsonl``,
  one JSON object per line, flushed and fsynced) before it counts as done, so a
  run killed at any point (Ctrl-C, a crash, ``kill -9``) resumes with
  ``--resume`` without redoing or duplicating a finished citation;
* the reports are rebuilt from the journal at the end, in input order, one row
  per input citation, exactly once.

Concurrency is bounded by an ``asyncio.Semaphore`` (``BATCH_CONCURRENCY``,
default 4). The pipeline is async; its blocking parts (embedding, journal
fsync, audit writes) run in worker threads so the event loop never stalls.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import hashlib
import io
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from pytest_citations.aggregate import Precision, aggregate
from pytest_citations.audit import AuditLog, new_run_id, utc_now
from pytest_citations.errors import CitationsError, InvalidCitationError, SourceError
from pytest_citations.models import CitationVerdict


class CitationVerifier(Protocol):
    """What a batch needs from :class:`~pytest_citations.pipeline.Verifier`."""

    async def averify_citation(
        self,
        claim: str,
        source: str,
        *,
        quote: str | None = None,
        section: str | None = None,
    ) -> CitationVerdict: ...


#: Exit codes of ``citations batch`` (documented in docs/doors.md).
EXIT_OK = 0
EXIT_CITATION_ERRORS = 1
EXIT_INPUT_ERRORS = 2
EXIT_CONFIGURATION = 3
EXIT_INTERRUPTED = 130

JOURNAL_SUFFIX = ".journal.jsonl"
JOURNAL_FORMAT = "pytest-citations batch journal"
JOURNAL_VERSION = 1

#: CSV columns, in order. ``error`` is set (and ``label`` empty) for a citation
#: the pipeline could not verify; such rows are left out of precision.
CSV_COLUMNS = (
    "id",
    "line",
    "url_index",
    "claim",
    "url",
    "label",
    "reason",
    "confidence",
    "needs_review",
    "evidence_quote",
    "final_url",
    "original_status",
    "rid",
    "quote",
    "section",
    "detail",
    "error",
)


# ----------------------------------------------------------------------------- input


@dataclass(frozen=True)
class BatchRecord:
    """One valid input line."""

    id: str
    claim: str
    urls: tuple[str, ...]
    line: int
    quote: str | None = None
    section: str | None = None

    def citations(self) -> Iterator[Citation]:
        for index, url in enumerate(self.urls):
            yield Citation(self, index, url)


@dataclass(frozen=True)
class Citation:
    """One claim-URL pair of a record; ``key`` identifies it in the journal."""

    record: BatchRecord
    index: int
    url: str

    @property
    def key(self) -> str:
        return f"{self.record.id}#{self.index}"

    def identity(self) -> dict[str, Any]:
        """What must match for a journal entry to stand for this citation."""
        return {
            "record": self.record.id,
            "index": self.index,
            "claim": self.record.claim,
            "url": self.url,
            "quote": self.record.quote,
            "section": self.record.section,
        }

    def digest(self) -> str:
        """SHA-256 of :meth:`identity`: the journal compares this, so the readable
        copies of the claim and URL it keeps may be scrubbed of secrets."""
        text = json.dumps(self.identity(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class InputProblem:
    """A line that was skipped, and why."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def _optional_text(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name!r} must be a string or null, got {type(value).__name__}")
    return value


def parse_record(text: str, line: int) -> BatchRecord:
    """One JSONL line as a record; ``ValueError`` says what is wrong with it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    missing = [name for name in ("id", "claim", "urls") if name not in data]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    record_id = data["id"]
    if isinstance(record_id, bool) or not isinstance(record_id, str | int):
        raise ValueError("'id' must be a string or an integer")
    record_id = str(record_id).strip()
    if not record_id:
        raise ValueError("'id' is empty")
    claim = data["claim"]
    if not isinstance(claim, str) or not claim.strip():
        raise ValueError("'claim' must be a non-empty string")
    urls = data["urls"]
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not urls:
        raise ValueError("'urls' must be a non-empty list of strings")
    if not all(isinstance(url, str) and url.strip() for url in urls):
        raise ValueError("every entry of 'urls' must be a non-empty string")
    return BatchRecord(
        id=record_id,
        claim=claim.strip(),
        urls=tuple(url.strip() for url in urls),
        line=line,
        quote=_optional_text(data.get("quote"), "quote"),
        section=_optional_text(data.get("section"), "section"),
    )


def parse_records(lines: Iterable[str]) -> tuple[list[BatchRecord], list[InputProblem]]:
    """Valid records in input order, and the problems of the lines that were skipped.

    Blank lines are ignored. A repeated id is an input error: the first line
    with the id is kept, each later one is reported (naming the first line).
    """
    records: list[BatchRecord] = []
    problems: list[InputProblem] = []
    first_line: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = parse_record(text, number)
        except ValueError as error:
            problems.append(InputProblem(number, str(error)))
            continue
        if record.id in first_line:
            problems.append(
                InputProblem(
                    number,
                    f"duplicate id {record.id!r} (first used on line {first_line[record.id]}); "
                    "line skipped",
                )
            )
            continue
        first_line[record.id] = number
        records.append(record)
    return records, problems


def read_records(path: str | os.PathLike[str]) -> tuple[list[BatchRecord], list[InputProblem]]:
    """Read a JSONL file (UTF-8, a BOM tolerated); see :func:`parse_records`."""
    with open(path, encoding="utf-8-sig", errors="replace", newline=None) as handle:
        return parse_records(handle)


# --------------------------------------------------------------------------- journal


class JournalError(CitationsError):
    """The journal cannot be used (an unfinished run without ``--resume``, a foreign file).

    A usage problem (exit code 2), not a configuration one.
    """


@dataclass
class JournalState:
    """What a journal holds: its header and its entries, in write order."""

    header: dict[str, Any]
    entries: list[dict[str, Any]] = field(default_factory=list)
    damaged_lines: int = 0


class Journal:
    """The append-only record of finished citations, next to the report.

    The first line is a header (format, version, run id, input); every other
    line is one finished citation: its identity (record id, URL index, claim,
    URL, quote, section) plus either ``verdict`` (the CitationVerdict as JSON)
    or ``error``. Each entry is written with one ``write`` call, flushed and
    fsynced before :meth:`append` returns. A line torn by a kill is dropped
    when the journal is reopened. Later entries for the same citation win.
    """

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.header = header
        self._lock = threading.Lock()
        self._handle: io.BufferedWriter | None = None

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    @staticmethod
    def path_for(report: str | os.PathLike[str]) -> Path:
        return Path(f"{os.fspath(report)}{JOURNAL_SUFFIX}")

    @staticmethod
    def read(path: Path) -> JournalState:
        """Parse a journal, dropping a torn last line (and any undecodable line)."""
        raw = path.read_bytes()
        lines = raw.split(b"\n")
        header: dict[str, Any] | None = None
        entries: list[dict[str, Any]] = []
        damaged = 0
        for chunk in lines:
            if not chunk.strip():
                continue
            try:
                item = json.loads(chunk)
            except (ValueError, UnicodeDecodeError):
                damaged += 1
                continue
            if not isinstance(item, dict):
                damaged += 1
                continue
            if header is None:
                if item.get("format") != JOURNAL_FORMAT:
                    raise JournalError(
                        f"{path} is not a pytest-citations batch journal; move it away "
                        "or pass another --out"
                    )
                header = item
                continue
            entries.append(item)
        if header is None:
            raise JournalError(f"{path} has no header line; delete it and run again")
        return JournalState(header, entries, damaged)

    @classmethod
    def create(cls, path: Path, header: dict[str, Any]) -> Journal:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as handle:
            handle.write(json.dumps(header, ensure_ascii=False).encode("utf-8") + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        return cls(path, header)

    @classmethod
    def reopen(cls, path: Path) -> tuple[Journal, JournalState]:
        """Open an existing journal for appending, cutting a torn last line first."""
        state = cls.read(path)
        with open(path, "r+b") as handle:
            data = handle.read()
            if data and not data.endswith(b"\n"):
                cut = data.rfind(b"\n") + 1
                handle.truncate(cut)
                handle.flush()
                os.fsync(handle.fileno())
        return cls(path, state.header), state

    def append(self, entry: Mapping[str, Any]) -> None:
        """Write one entry durably (thread-safe; call it from a worker thread)."""
        data = json.dumps(entry, ensure_ascii=False, default=str).encode("utf-8") + b"\n"
        with self._lock:
            if self._handle is None:
                self._handle = open(self.path, "ab")  # noqa: SIM115 - kept open for the run
            self._handle.write(data)
            self._handle.flush()
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None


def _fsync_dir(directory: Path) -> None:
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def finished_entries(
    citations: Sequence[Citation], entries: Iterable[Mapping[str, Any]]
) -> dict[str, Mapping[str, Any]]:
    """For each citation, its latest journal entry that matches it, by key.

    An entry whose claim, URL, quote or section differs from the input (the file
    was edited between runs) does not match, so that citation is redone.
    """
    wanted = {citation.digest(): citation.key for citation in citations}
    latest: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        key = wanted.get(str(entry.get("digest")))
        if key is None:
            continue
        if "verdict" not in entry and "error" not in entry:
            continue
        latest[key] = entry
    return latest


# -------------------------------------------------------------------------- progress


class Progress:
    """A bar on a terminal, plain lines otherwise; always on ``stream`` (stderr)."""

    def __init__(
        self,
        total: int,
        done: int,
        stream: TextIO,
        *,
        tty: bool | None = None,
        scrubber: Scrubber | None = None,
    ) -> None:
        self.scrubber = scrubber or Scrubber(())
        self.total = total
        self.done = done
        self.errors = 0
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._drawn = False
        self._last_draw = 0.0

    def start(self) -> None:
        if self.done:
            self._write_line(f"resuming: {self.done}/{self.total} citations already done")
        if self.tty:
            self._draw(force=True)

    def advance(self, citation: Citation, outcome: str) -> None:
        self.done += 1
        if self.tty:
            self._draw()
        else:
            self._write_line(
                self.scrubber.text(
                    f"[{self.done}/{self.total}] {citation.record.id} #{citation.index} "
                    f"{outcome} {citation.url}"
                )
            )

    def _draw(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and self.done < self.total and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        width = 30
        filled = width * self.done // self.total if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        errors = f", {self.errors} error(s)" if self.errors else ""
        self.stream.write(f"\rverifying [{bar}] {self.done}/{self.total}{errors}")
        self.stream.flush()
        self._drawn = True

    def _write_line(self, text: str) -> None:
        if self._drawn:
            self.stream.write("\n")
            self._drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


# ---------------------------------------------------------------------------- result


@dataclass(frozen=True)
class BatchRow:
    """One report row: an input citation and its verdict (or the error that stopped it)."""

    citation: Citation
    verdict: CitationVerdict | None
    error: str | None = None

    def as_csv(self) -> dict[str, Any]:
        record = self.citation.record
        verdict = self.verdict
        row: dict[str, Any] = {
            "id": record.id,
            "line": record.line,
            "url_index": self.citation.index,
            "claim": record.claim,
            "url": self.citation.url,
            "quote": record.quote or "",
            "section": record.section or "",
            "error": self.error or "",
        }
        if verdict is not None:
            row.update(
                label=verdict.label.value,
                reason=verdict.reason or "",
                confidence="" if verdict.confidence is None else verdict.confidence,
                needs_review=str(verdict.needs_review).lower(),
                evidence_quote=verdict.evidence_quote or "",
                final_url=verdict.final_url or "",
                original_status="" if verdict.original_status is None else verdict.original_status,
                rid=verdict.rid or "",
                detail=verdict.detail or "",
            )
        return {column: row.get(column, "") for column in CSV_COLUMNS}


@dataclass
class BatchResult:
    """What a batch run produced."""

    run_id: str
    rows: list[BatchRow]
    problems: list[InputProblem]
    precision: Precision
    verified_now: int
    resumed: int

    @property
    def errors(self) -> list[BatchRow]:
        return [row for row in self.rows if row.verdict is None]

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_INPUT_ERRORS
        if self.errors:
            return EXIT_CITATION_ERRORS
        return EXIT_OK

    def as_json(self) -> dict[str, Any]:
        """The JSON report: summary, input problems, and claims with their citations."""
        claims: list[dict[str, Any]] = []
        by_record: dict[str, dict[str, Any]] = {}
        for row in self.rows:
            record = row.citation.record
            entry = by_record.get(record.id)
            if entry is None:
                entry = {
                    "id": record.id,
                    "line": record.line,
                    "claim": record.claim,
                    "quote": record.quote,
                    "section": record.section,
                    "overall": None,
                    "citations": [],
                }
                by_record[record.id] = entry
                claims.append(entry)
            if row.verdict is not None:
                citation = row.verdict.model_dump(mode="json")
            else:
                citation = {"url": row.citation.url, "label": None, "error": row.error}
            entry["citations"].append(citation)
        for entry in claims:
            labels = [c["label"] for c in entry["citations"] if c.get("label")]
            complete = len(labels) == len(entry["citations"])
            entry["overall"] = aggregate(labels).value if complete else None
        p = self.precision
        return {
            "run_id": self.run_id,
            "summary": {
                "citations": len(self.rows),
                "supported": p.supported,
                "total": p.total,
                "reachable": p.reachable,
                "citation_precision": p.citation_precision,
                "reachable_precision": p.reachable_precision,
                "errors": len(self.errors),
                "skipped_lines": len(self.problems),
            },
            "problems": [{"line": item.line, "message": item.message} for item in self.problems],
            "claims": claims,
        }


def write_csv(path: Path, rows: Sequence[BatchRow], scrubber: Scrubber | None = None) -> None:
    """The CSV report, written atomically; every cell passes through ``scrubber``."""
    scrub = scrubber or Scrubber(())
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        cells = scrub.deep(row.as_csv())
        writer.writerow({name: _defuse(value) for name, value in cells.items()})
    _atomic_write(path, buffer.getvalue())


#: First characters a spreadsheet reads as a formula. Claims, quotes and page text
#: come from a model or a web page, so a cell must never run as one (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _defuse(value: Any) -> Any:
    """Prefix ``'`` to a text cell a spreadsheet would evaluate; numbers stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def write_json(path: Path, result: BatchResult, scrubber: Scrubber | None = None) -> None:
    """The JSON report (:meth:`BatchResult.as_json`), written atomically and scrubbed."""
    scrub = scrubber or Scrubber(())
    text = json.dumps(scrub.deep(result.as_json()), indent=2, ensure_ascii=False)
    _atomic_write(path, text + "\n")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- runner


class Scrubber:
    """Replaces every configured secret value in strings bound for disk."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, "***")
        return value

    def deep(self, value: Any) -> Any:
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.deep(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.deep(item) for item in value]
        return value


#: Errors that concern one citation (its source), not the whole run.
_CITATION_ERRORS: tuple[type[BaseException], ...] = (SourceError, InvalidCitationError)


@dataclass
class BatchOptions:
    """Everything :func:`run_batch` needs besides the verifier."""

    input: Path
    out: Path
    json_out: Path | None = None
    concurrency: int = 4
    resume: bool = False
    restart: bool = False
    audit: Path | None = None
    keep_journal: bool = False


class _Runner:
    def __init__(
        self,
        verifier: CitationVerifier,
        journal: Journal,
        audit: AuditLog | None,
        progress: Progress,
        concurrency: int,
        scrubber: Scrubber,
    ) -> None:
        self.verifier = verifier
        self.journal = journal
        self.audit = audit
        self.progress = progress
        self.semaphore = asyncio.Semaphore(concurrency)
        self.scrubber = scrubber
        self.finished: dict[str, Mapping[str, Any]] = {}
        # Journal and audit writes (each fsynced) go through one thread of their
        # own: they are sequential anyway, and in the default executor they would
        # queue in front of the pipeline's CPU work (page extraction, embeddings).
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="citations-journal")

    async def run(self, pending: Sequence[Citation]) -> None:
        tasks = [asyncio.create_task(self._one(citation)) for citation in pending]
        if not tasks:
            self.writer.shutdown()
            return
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = [task for task in done if task.exception() is not None]
            if failed:
                error = failed[0].exception()
                assert error is not None
                raise error
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.writer.shutdown(wait=True)

    async def _one(self, citation: Citation) -> None:
        record = citation.record
        async with self.semaphore:
            try:
                verdict: CitationVerdict | None = await self.verifier.averify_citation(
                    record.claim, citation.url, quote=record.quote, section=record.section
                )
                error = None
            except _CITATION_ERRORS as problem:
                verdict, error = None, f"{type(problem).__name__}: {problem}"
            except CitationsError:
                raise  # configuration or cassette problem: every citation would fail
            except Exception as problem:  # a bug or an unexpected failure: keep going
                verdict, error = None, f"{type(problem).__name__}: {problem}"
        entry: dict[str, Any] = {
            **citation.identity(),
            "digest": citation.digest(),
            "line": record.line,
            "at": utc_now(),
        }
        if verdict is not None:
            entry["verdict"] = verdict.model_dump(mode="json")
        else:
            entry["error"] = error
        entry = self.scrubber.deep(entry)
        if verdict is not None:
            verdict = CitationVerdict.model_validate(entry["verdict"])
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.writer, self._persist, citation, verdict, entry)
        self.finished[citation.key] = entry
        if verdict is None:
            self.progress.errors += 1
        self.progress.advance(citation, verdict.label.value if verdict else "error")

    def _persist(
        self, citation: Citation, verdict: CitationVerdict | None, entry: Mapping[str, Any]
    ) -> None:
        # Audit first, keyed and idempotent within the run: a kill between the
        # two writes redoes the citation on resume and replaces its audit row.
        if self.audit is not None and verdict is not None:
            self.audit.record(
                self.journal.run_id,
                verdict,
                claim=self.scrubber.text(citation.record.claim),
                key=citation.digest(),
            )
        self.journal.append(entry)


def open_journal(options: BatchOptions, records_digest: str) -> tuple[Journal, JournalState]:
    path = Journal.path_for(options.out)
    if path.exists() and not options.restart:
        if not options.resume:
            raise JournalError(
                f"{path} holds an unfinished run: pass --resume to continue it "
                "or --restart to discard it"
            )
        return Journal.reopen(path)
    header = {
        "format": JOURNAL_FORMAT,
        "version": JOURNAL_VERSION,
        "run_id": new_run_id(),
        "input": os.fspath(options.input),
        "input_sha256": records_digest,
        "started": utc_now(),
    }
    journal = Journal.create(path, header)
    return journal, JournalState(header)


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            hasher.update(block)
    return hasher.hexdigest()


def build_rows(
    citations: Sequence[Citation], finished: Mapping[str, Mapping[str, Any]]
) -> list[BatchRow]:
    rows: list[BatchRow] = []
    for citation in citations:
        entry = finished.get(citation.key)
        if entry is None:  # pragma: no cover - run() finishes every citation or raises
            rows.append(BatchRow(citation, None, "not verified"))
        elif "verdict" in entry:
            rows.append(BatchRow(citation, CitationVerdict.model_validate(entry["verdict"])))
        else:
            rows.append(BatchRow(citation, None, str(entry.get("error"))))
    return rows


async def run_batch(
    options: BatchOptions,
    verifier: CitationVerifier,
    *,
    stderr: TextIO | None = None,
    tty: bool | None = None,
    secrets: Iterable[str] = (),
    report_problem: Callable[[InputProblem], None] | None = None,
) -> BatchResult:
    """Run (or resume) a batch and write its reports; see the module docstring.

    ``verifier`` is a :class:`~pytest_citations.pipeline.Verifier` (anything with
    ``averify_citation``). Raises :class:`JournalError` for an unfinished
    journal without ``resume``; configuration and cassette
    errors propagate, with every citation finished so far safe in the journal.
    """
    from pytest_citations.transport import shared_connections

    err = stderr if stderr is not None else sys.stderr
    scrubber = Scrubber(secrets)
    records, problems = read_records(options.input)
    for problem in problems:
        if report_problem is not None:
            report_problem(problem)
        else:
            err.write(scrubber.text(f"{options.input}: {problem}\n"))
    citations = [citation for record in records for citation in record.citations()]
    journal, state = open_journal(options, _digest(options.input))
    try:
        finished = dict(finished_entries(citations, state.entries))
        done = {key for key, entry in finished.items() if "verdict" in entry}
        pending = [citation for citation in citations if citation.key not in done]
        resumed = len(citations) - len(pending)
        audit = AuditLog(options.audit) if options.audit is not None else None
        progress = Progress(len(citations), resumed, err, tty=tty, scrubber=scrubber)
        runner = _Runner(verifier, journal, audit, progress, max(1, options.concurrency), scrubber)
        runner.finished = finished
        progress.start()
        try:
            # One connection pool for the whole batch: pages and judge calls reuse
            # kept-alive connections (and TLS sessions) across citations.
            async with shared_connections():
                await runner.run(pending)
        finally:
            progress.finish()
    finally:
        journal.close()
    rows = build_rows(citations, runner.finished)
    precision = Precision.from_verdicts(row.verdict for row in rows if row.verdict is not None)
    result = BatchResult(
        run_id=journal.run_id,
        rows=rows,
        problems=problems,
        precision=precision,
        verified_now=len(pending),
        resumed=resumed,
    )
    write_csv(options.out, rows, scrubber)
    if options.json_out is not None:
        write_json(options.json_out, result, scrubber)
    if not result.errors and not options.keep_journal:
        with contextlib.suppress(FileNotFoundError):
            journal.path.unlink()
    return result
