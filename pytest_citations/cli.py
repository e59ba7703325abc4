"""The ``citations`` command: batch runs, stored-page replay, the audit index, the service.

Only the standard library is imported here; each subcommand imports what it
needs when it runs, so ``citations --help`` is instant.

Exit codes (every subcommand):

====  =====================================================================
0     success
1     some citations could not be verified (``batch``: listed in the report's
      ``error`` column; rerun with ``--resume`` to retry only those), or a
      stored page could not be read (``replay``)
2     usage or input problem: malformed or duplicate input lines (reported
      with their line numbers and skipped; the rest of the batch ran), an
      unreadable input file, an unfinished journal without ``--resume``
3     configuration problem: a missing token or key (the message names the
      variable, never its value), an invalid setting, a missing cassette in
      ``--record-mode none``, a missing optional dependency
130   interrupted (Ctrl-C); finished citations are kept, ``--resume`` continues
====  =====================================================================
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from pytest_citations.pipeline import Verifier
    from pytest_citations.retrieval import Embedder
    from pytest_citations.settings import Settings
    from pytest_citations.transport import Recorder

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIGURATION = 3
EXIT_INTERRUPTED = 130

DEFAULT_REPORT = "citation_report.csv"
DEFAULT_CASSETTE_DIR = "cassettes"
RECORD_MODES = ("none", "once", "new_episodes", "all")
SERVER_EXTRA = "pip install 'pytest-citations[server]'"


class _Stop(Exception):
    """Leave the command with a message on stderr and an exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from pytest_citations import __version__

    parser = argparse.ArgumentParser(
        prog="citations",
        description="Check that the pages an LLM cited say what the LLM claims.",
        epilog="Exit codes: 0 ok, 1 some citations failed, 2 usage/input problem, "
        "3 configuration problem (missing key...), 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    batch = commands.add_parser(
        "batch",
        help="verify every citation of a JSONL file and report citation precision",
        description="One row per claim-URL pair. Input lines: "
        '{"id", "claim", "urls": [...], "quote"?, "section"?}. Prints '
        "citation_precision and reachable_precision on stdout.",
    )
    batch.add_argument("input", type=Path, metavar="INPUT.jsonl")
    batch.add_argument(
        "--out",
        type=Path,
        default=Path(DEFAULT_REPORT),
        help=f"CSV report (default: {DEFAULT_REPORT}); its journal is <out>.journal.jsonl",
    )
    batch.add_argument("--json", dest="json_out", type=Path, help="also write a JSON report")
    batch.add_argument(
        "--concurrency",
        type=_positive_int,
        help="citations verified at once (default: BATCH_CONCURRENCY, else 4)",
    )
    again = batch.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run from its journal, redoing nothing that finished",
    )
    again.add_argument("--restart", action="store_true", help="discard an unfinished run's journal")
    batch.add_argument(
        "--keep-journal",
        action="store_true",
        help="keep the journal after a complete run (it is removed by default)",
    )
    batch.add_argument(
        "--audit-db",
        type=Path,
        help="SQLite audit index (default: citations-audit.sqlite3 beside the report)",
    )
    batch.add_argument("--no-audit", action="store_true", help="do not write audit rows")
    batch.add_argument(
        "--record-mode",
        choices=RECORD_MODES,
        help="use cassettes (the pytest plugin's machinery): none replays only, once "
        "records what is missing, new_episodes adds, all re-records",
    )
    batch.add_argument(
        "--cassette-dir",
        type=Path,
        help=f"cassette folder (default: {DEFAULT_CASSETTE_DIR}; implies --record-mode once)",
    )
    batch.set_defaults(handler=_batch)

    replay = commands.add_parser(
        "replay",
        help="print a page Crawlbase stored (by rid) from the Storage API",
        description="Either CRAWLBASE_TOKEN or CRAWLBASE_JS_TOKEN can read any rid of "
        "the account. Pages are kept 30 days.",
    )
    replay.add_argument("rid")
    replay.add_argument("--out", type=Path, help="write the page to a file instead of stdout")
    replay.set_defaults(handler=_replay)

    audit = commands.add_parser("audit", help="list rows of the audit index")
    audit.add_argument("--since", help="only rows at or after this ISO date/time (UTC if no zone)")
    audit.add_argument(
        "--label",
        choices=("supported", "contradicted", "not_found", "unreachable", "fabricated"),
    )
    audit.add_argument("--run", dest="run_id", help="only rows of this run id")
    audit.add_argument("--db", type=Path, help="audit index (default: ./citations-audit.sqlite3)")
    audit.add_argument("--json", dest="as_json", action="store_true", help="JSON lines output")
    audit.set_defaults(handler=_audit)

    serve = commands.add_parser("serve", help="run the /verify HTTP service (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(handler=_serve)
    return parser


# ---------------------------------------------------------------------------- helpers


class _Context:
    """What handlers share: the streams, and an injected verifier (tests, embedding)."""

    def __init__(
        self,
        stdout: TextIO,
        stderr: TextIO,
        verifier: Verifier | None,
        embedder: Embedder | None = None,
    ) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.verifier = verifier
        self.embedder = embedder
        self.secrets: list[str] = []

    def scrub(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text


def _settings(context: _Context, **overrides: Any) -> Settings:
    from pytest_citations.settings import Settings

    settings = Settings.from_env(**overrides)
    context.secrets = settings.secret_values()
    return settings


def _recorder(settings: Settings, mode: str | None, directory: Path | None) -> Recorder | None:
    if mode is None and directory is None:
        return None
    from pytest_citations.cassettes import CassetteRecorder, known_secrets

    return CassetteRecorder(
        directory or Path(DEFAULT_CASSETTE_DIR),
        record_mode=mode or "once",
        secrets=known_secrets(settings),
        allow_private_hosts=settings.allow_private_hosts,
    )


# --------------------------------------------------------------------------- commands


def _batch(args: argparse.Namespace, context: _Context) -> int:
    import asyncio

    from pytest_citations.audit import default_audit_path
    from pytest_citations.batch import BatchOptions, Journal, run_batch

    if not args.input.is_file():
        raise _Stop(EXIT_USAGE, f"citations batch: no such input file: {args.input}")
    if context.verifier is not None:
        verifier = context.verifier
        context.secrets = verifier.settings.secret_values()
        concurrency = args.concurrency or verifier.settings.batch_concurrency
    else:
        from pytest_citations.pipeline import Verifier

        settings = _settings(context, batch_concurrency=args.concurrency)
        verifier = Verifier(
            settings,
            embedder=context.embedder,
            recorder=_recorder(settings, args.record_mode, args.cassette_dir),
        )
        concurrency = settings.batch_concurrency
    audit_path = None
    if not args.no_audit:
        audit_path = args.audit_db or default_audit_path(args.out.parent)
    options = BatchOptions(
        input=args.input,
        out=args.out,
        json_out=args.json_out,
        concurrency=concurrency,
        resume=args.resume,
        restart=args.restart,
        audit=audit_path,
        keep_journal=args.keep_journal,
    )
    try:
        result = asyncio.run(
            run_batch(options, verifier, stderr=context.stderr, secrets=context.secrets)
        )
    except KeyboardInterrupt:
        raise _Stop(
            EXIT_INTERRUPTED,
            f"citations batch: interrupted; finished citations are kept in "
            f"{Journal.path_for(args.out)}. Run the same command with --resume to continue.",
        ) from None
    for line in result.precision.lines():
        context.stdout.write(line + "\n")
    context.stdout.flush()
    err = context.stderr
    written = f"report: {args.out}" + (f", {args.json_out}" if args.json_out else "")
    err.write(f"{written}; run id {result.run_id}\n")
    if result.errors:
        err.write(
            f"{len(result.errors)} citation(s) could not be verified (error column of the "
            f"report; left out of precision). Rerun with --resume to retry them.\n"
        )
        for row in result.errors[:20]:
            err.write(
                context.scrub(
                    f"  line {row.citation.record.line} {row.citation.record.id} "
                    f"#{row.citation.index}: {row.error}\n"
                )
            )
    if result.problems:
        err.write(
            f"{len(result.problems)} input line(s) skipped (see above); exit code {EXIT_USAGE}.\n"
        )
    return result.exit_code


def _replay(args: argparse.Namespace, context: _Context) -> int:
    import asyncio

    from pytest_citations.fetch.crawlbase import read_stored_page
    from pytest_citations.transport import LiveRecorder

    if context.verifier is not None:
        settings = context.verifier.settings
        context.secrets = settings.secret_values()
        recorder: Recorder = context.verifier.recorder
    else:
        settings = _settings(context)
        recorder = LiveRecorder(allow_private_hosts=settings.allow_private_hosts)
    if settings.crawlbase_token is None and settings.crawlbase_js_token is None:
        raise _Stop(
            EXIT_CONFIGURATION,
            "citations replay: CRAWLBASE_TOKEN is not set (CRAWLBASE_JS_TOKEN works too): "
            "the Storage API needs a token of the account that stored the page.",
        )
    text = asyncio.run(read_stored_page(args.rid, settings, recorder))
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
        context.stderr.write(f"wrote {args.out}\n")
    else:
        context.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def _audit(args: argparse.Namespace, context: _Context) -> int:
    from pytest_citations.audit import AuditLog, default_audit_path, parse_since

    path = args.db or default_audit_path()
    if not path.is_file():
        raise _Stop(EXIT_USAGE, f"citations audit: no audit index at {path} (see --db)")
    if args.since is not None:
        try:
            parse_since(args.since)
        except ValueError:
            raise _Stop(
                EXIT_USAGE,
                f"citations audit: --since {args.since!r} is not an ISO date or date-time "
                "(e.g. 2024-05-01 or 2024-05-01T12:00:00Z)",
            ) from None
    rows = AuditLog(path).rows(since=args.since, label=args.label, run_id=args.run_id)
    out = context.stdout
    if args.as_json:
        for row in rows:
            out.write(json.dumps(row.as_dict(), ensure_ascii=False) + "\n")
        return EXIT_OK
    out.write(format_table(rows) + "\n")
    return EXIT_OK


def format_table(rows: Sequence[Any]) -> str:
    """Audit rows as a fixed-width table (long claims and URLs are shortened)."""
    headers = ("timestamp", "run_id", "label", "conf", "reason", "rid", "url", "claim")
    limits = (32, 26, 12, 5, 28, 24, 60, 60)
    table = [headers]
    for row in rows:
        confidence = "" if row.confidence is None else f"{row.confidence:.2f}"
        table.append(
            (
                row.timestamp,
                row.run_id,
                row.label,
                confidence,
                row.reason or "",
                row.rid or "",
                row.url,
                row.claim,
            )
        )
    cut = [
        tuple(_shorten(str(cell), limit) for cell, limit in zip(line, limits, strict=True))
        for line in table
    ]
    widths = [max(len(line[index]) for line in cut) for index in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cut
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _serve(args: argparse.Namespace, context: _Context) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        raise _Stop(
            EXIT_CONFIGURATION,
            f"citations serve needs FastAPI and uvicorn: {SERVER_EXTRA}",
        ) from None
    from pytest_citations.service import create_app

    verifier = context.verifier
    if verifier is None and context.embedder is not None:
        from pytest_citations.pipeline import Verifier

        verifier = Verifier(_settings(context), embedder=context.embedder)
    app = create_app(verifier)
    uvicorn.run(app, host=args.host, port=args.port)
    return EXIT_OK


# ------------------------------------------------------------------------------- main


def main(
    argv: Sequence[str] | None = None,
    *,
    verifier: Verifier | None = None,
    embedder: Embedder | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the ``citations`` command; returns the exit code (see the module docstring).

    ``verifier`` replaces the one built from the environment (flags such as
    ``--record-mode`` then do not apply); ``embedder`` only replaces the
    embedding model of the verifier the command builds. Both exist for tests
    and for programs that embed the command.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    context = _Context(stdout or sys.stdout, stderr or sys.stderr, verifier, embedder)
    from pytest_citations.errors import (
        CassetteError,
        CassetteMissingError,
        CitationsError,
        ConfigurationError,
    )

    try:
        code: int = args.handler(args, context)
        return code
    except _Stop as stop:
        context.stderr.write(context.scrub(str(stop)) + "\n")
        return stop.code
    except KeyboardInterrupt:
        context.stderr.write(f"citations {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
    except (ConfigurationError, CassetteError) as error:
        context.stderr.write(f"citations {args.command}: {context.scrub(str(error))}\n")
        if isinstance(error, CassetteMissingError) and args.command == "batch":
            context.stderr.write(
                "for this batch: record it with --record-mode once (same --cassette-dir), "
                "then replay with --record-mode none; add --resume to keep finished work\n"
            )
        return EXIT_CONFIGURATION
    except CitationsError as error:  # journal misuse, a stored page that is gone
        from pytest_citations.batch import JournalError

        code = EXIT_USAGE if isinstance(error, JournalError) else EXIT_FAILED
        context.stderr.write(f"citations {args.command}: {context.scrub(str(error))}\n")
        return code
    except OSError as error:
        context.stderr.write(f"citations {args.command}: {context.scrub(str(error))}\n")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
